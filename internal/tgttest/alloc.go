package tgttest

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Extent is a byte range [Off, Off+Len) of a file.
type Extent struct{ Off, Len int64 }

// Whence values of lseek(2) that package os does not name.
const (
	seekData = 3
	seekHole = 4
)

// DataExtents lists the allocated (non-hole) ranges of a backing file, by
// lseek SEEK_DATA/SEEK_HOLE. With ThinProvisioning, UNMAP and WRITE SAME
// with UNMAP punch holes, so a trimmed range disappears from this list;
// without it tgt writes zeroes and the range stays allocated. Filesystems
// may round to their block size (4 KiB on ext4, tmpfs: pages).
func DataExtents(path string) ([]Extent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("data extents: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("data extents: %w", err)
	}
	var out []Extent
	for off := int64(0); off < fi.Size(); {
		data, err := f.Seek(off, seekData)
		if errors.Is(err, syscall.ENXIO) {
			break // no data after off
		}
		if err != nil {
			return nil, fmt.Errorf("data extents: seek data at %d: %w", off, err)
		}
		hole, err := f.Seek(data, seekHole)
		if err != nil {
			return nil, fmt.Errorf("data extents: seek hole at %d: %w", data, err)
		}
		out = append(out, Extent{Off: data, Len: hole - data})
		off = hole
	}
	return out, nil
}

// AllocatedBytes is the space the file occupies on disk (st_blocks * 512).
func AllocatedBytes(path string) (int64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("allocated bytes: %w", err)
	}
	return st.Blocks * 512, nil
}

// Overlaps reports whether any extent intersects [off, off+n).
func Overlaps(exts []Extent, off, n int64) bool {
	for _, e := range exts {
		if e.Off < off+n && off < e.Off+e.Len {
			return true
		}
	}
	return false
}

package volume

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// LinkDir holds stable names of attached volumes: LinkDir/NAME and
// LinkDir/by-wwn/WWN, symbolic links to the block device.
var LinkDir = "/dev/iser"

// linkPaths are the links of a volume: by name, and by WWN when wwn is
// not empty.
func linkPaths(name, wwn string) ([]string, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	paths := []string{filepath.Join(LinkDir, name)}
	if wwn != "" {
		if err := validWWN(wwn); err != nil {
			return nil, err
		}
		paths = append(paths, filepath.Join(LinkDir, "by-wwn", wwn))
	}
	return paths, nil
}

// validWWN accepts a WWN as the LUN reports it ("naa.6001405...") as a file
// name: no '/', no "..", no control characters.
func validWWN(wwn string) error {
	if len(wwn) > 255 || wwn == "." || strings.Contains(wwn, "/") || strings.Contains(wwn, "..") ||
		strings.IndexFunc(wwn, func(r rune) bool { return r < ' ' || r == 0x7f }) >= 0 {
		return fmt.Errorf("WWN %q cannot name a link", wwn)
	}
	return nil
}

// CreateLinks points LinkDir/NAME, and LinkDir/by-wwn/WWN when wwn is not
// empty, at device (an absolute path such as /dev/ublkb0). An existing
// link is replaced atomically.
func CreateLinks(name, device, wwn string) error {
	if !filepath.IsAbs(device) {
		return fmt.Errorf("create links for %s: device %q is not an absolute path", name, device)
	}
	paths, err := linkPaths(name, wwn)
	if err != nil {
		return fmt.Errorf("create links: %w", err)
	}
	for _, p := range paths {
		if err := replaceLink(device, p); err != nil {
			return fmt.Errorf("create links for %s: %w", name, err)
		}
	}
	return dropStaleLinks(device, paths)
}

// dropStaleLinks removes the links in LinkDir and LinkDir/by-wwn, other
// than keep, that point at device: a server killed before it could remove
// its links leaves them, and the kernel gives its device number to the
// next device, now another volume's. Such a link would lead to the wrong
// disk.
func dropStaleLinks(device string, keep []string) error {
	var errs []error
	for _, dir := range []string{LinkDir, filepath.Join(LinkDir, "by-wwn")} {
		ents, err := os.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("stale links: %w", err))
			}
			continue
		}
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			if e.Type()&fs.ModeSymlink == 0 || strings.HasPrefix(e.Name(), ".") || slices.Contains(keep, p) {
				continue
			}
			if linkTarget(p) != filepath.Clean(device) {
				continue
			}
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("stale link: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// linkTarget is where the link at p points, made absolute, or "" when p is
// not a link.
func linkTarget(p string) string {
	target, err := os.Readlink(p)
	if err != nil {
		return ""
	}
	if !filepath.IsAbs(target) {
		// udev (60-iser-attach.rules) rewrites the link relative: ../ublkb0.
		target = filepath.Join(filepath.Dir(p), target)
	}
	return filepath.Clean(target)
}

// replaceLink makes path a symbolic link to target: a link under a
// temporary name renamed over path.
func replaceLink(target, path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var tmp string
	for range 10 {
		var rnd [6]byte
		_, _ = rand.Read(rnd[:])
		tmp = filepath.Join(dir, "."+filepath.Base(path)+".tmp-"+hex.EncodeToString(rnd[:]))
		err := os.Symlink(target, tmp)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) {
			return err
		}
		tmp = ""
	}
	if tmp == "" {
		return fmt.Errorf("symlink %s: no free temporary name", path)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// RemoveLinks removes the links CreateLinks made for name and wwn, but
// only those that still point at device: another attach of the same name
// or LUN may own them by now. A missing link is not an error. (A link
// replaced between the check and the removal is still removed: the window
// is one readlink and one unlink wide.)
func RemoveLinks(name, device, wwn string) error {
	paths, err := linkPaths(name, wwn)
	if err != nil {
		return fmt.Errorf("remove links: %w", err)
	}
	var errs []error
	for _, p := range paths {
		target, err := os.Readlink(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove link: %w", err))
			continue
		}
		if !filepath.IsAbs(target) {
			// udev (60-iser-attach.rules) rewrites the link relative: ../ublkb0.
			target = filepath.Join(filepath.Dir(p), target)
		}
		if filepath.Clean(target) != filepath.Clean(device) {
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove link: %w", err))
		}
	}
	return errors.Join(errs...)
}

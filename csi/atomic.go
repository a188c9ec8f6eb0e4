package csi

import (
	"os"
	"path/filepath"
)

// writeAtomic writes b and a newline to dir/name the way a crash cannot
// tear: a temporary file, synced, renamed over name, the directory synced.
// A reader finds the old content or the new, never a mix.
func writeAtomic(dir, name string, b []byte) error {
	p := filepath.Join(dir, name)
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	syncDir(dir)
	return nil
}

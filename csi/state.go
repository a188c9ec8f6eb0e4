package csi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// The state directory holds stateFileName, the allocations, and
// lockFileName, which one controller holds locked (flock) for as long as
// it runs, so that two controllers never share one directory.
const (
	stateFileName = "controller.json"
	lockFileName  = "controller.lock"
	stateVersion  = 1
)

// Allocation is one volume: a CreateVolume name and the LU it got.
type Allocation struct {
	Name     string    `json:"name"`
	VolumeID string    `json:"volume_id"`
	LUN      uint16    `json:"lun"`
	LUID     string    `json:"luid"`
	Capacity int64     `json:"capacity_bytes"`
	Created  time.Time `json:"created"`
}

// stateFile is the JSON of stateFileName.
type stateFile struct {
	Version int          `json:"version"`
	Target  string       `json:"target"`
	Volumes []Allocation `json:"volumes"`
}

// Store is an open state directory.
type Store struct {
	dir  string
	lock *os.File
}

// OpenStore creates dir if needed and locks it; it fails when another
// process holds the lock.
func OpenStore(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open state directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, lockFileName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open state directory: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("open state directory %s: another controller holds %s", dir, lockFileName)
		}
		return nil, fmt.Errorf("open state directory: lock %s: %w", lockFileName, err)
	}
	return &Store{dir: dir, lock: f}, nil
}

// Close releases the lock.
func (s *Store) Close() error { return s.lock.Close() }

// Dir is the state directory.
func (s *Store) Dir() string { return s.dir }

// load reads the allocations; none when the file does not exist yet.
func (s *Store) load() (*stateFile, error) {
	p := filepath.Join(s.dir, stateFileName)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return &stateFile{Version: stateVersion}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	var st stateFile
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("read state %s: %w", p, err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("read state %s: version %d, this controller knows %d", p, st.Version, stateVersion)
	}
	return &st, nil
}

// save writes st to a temporary file, syncs it and renames it over the
// state file, then syncs the directory: a crash leaves the old state or
// the new one, never a mix.
func (s *Store) save(st *stateFile) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	if err := writeAtomic(s.dir, stateFileName, b); err != nil {
		return fmt.Errorf("write state: %w", err)
	}
	return nil
}

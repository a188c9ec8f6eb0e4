package csi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// load reads every staged volume from n.dir (node/NAME.json), written by
// this plugin or an earlier one.
func (n *Node) load() error {
	if err := os.MkdirAll(n.dir, 0o700); err != nil {
		return fmt.Errorf("open node state: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(n.dir, "node.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open node state: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("open node state %s: another node plugin holds node.lock", n.dir)
		}
		return fmt.Errorf("open node state: lock: %w", err)
	}
	n.lock = f
	ents, err := os.ReadDir(n.dir)
	if err != nil {
		return fmt.Errorf("open node state: %w", err)
	}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		p := filepath.Join(n.dir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			n.Close()
			return fmt.Errorf("read node state: %w", err)
		}
		var v nodeVolume
		if err := json.Unmarshal(b, &v); err != nil {
			n.Close()
			return fmt.Errorf("read node state %s: %w", p, err)
		}
		if v.VolumeID == "" || v.Name != AttachName(n.NodeID, v.VolumeID) || e.Name() != v.Name+".json" {
			n.Close()
			return fmt.Errorf("read node state %s: volume ID %q does not match the file", p, v.VolumeID)
		}
		n.vols[v.VolumeID] = &v
		n.log.Info().Str("volume_id", v.VolumeID).Str("name", v.Name).Str("staging_path", v.StagingPath).
			Str("device", v.Device).Int("published", len(v.Published)).Msg("staged volume read back from the state directory")
	}
	return nil
}

// Close releases the node state's lock.
func (n *Node) Close() error {
	if n.lock == nil {
		return nil
	}
	return n.lock.Close()
}

// save records v in n.dir/NAME.json: a temporary file, synced, renamed over
// it, the directory synced. A crash leaves the old record or the new one.
func (n *Node) save(v *nodeVolume) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("write node state: %w", err)
	}
	if err := writeAtomic(n.dir, v.Name+".json", b); err != nil {
		return fmt.Errorf("write node state: %w", err)
	}
	n.vols[v.VolumeID] = v
	return nil
}

// remove forgets v.
func (n *Node) remove(v *nodeVolume) error {
	if err := os.Remove(filepath.Join(n.dir, v.Name+".json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove node state: %w", err)
	}
	syncDir(n.dir)
	delete(n.vols, v.VolumeID)
	return nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

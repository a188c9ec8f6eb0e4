package volume

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// State is what a volume leaves in RunDir so that the next attach of the
// same name finds its device: a ublk device survives its server (user
// recovery) and is taken over instead of created anew.
type State struct {
	Frontend string `json:"frontend"`
	ID       int    `json:"id"`
	Device   string `json:"device"`
	// PID is the process that created or last took over the device.
	PID int `json:"pid,omitempty"`
	// LUN is the disk the device shows: a later attach takes the device
	// over only for the same LUN (Identity.Check).
	LUN Identity `json:"lun"`
}

// Identity tells one LUN from another: its WWN (VPD 0x83), unit serial
// number (VPD 0x80), size and logical block size, and where it was found
// (target name and LUN number).
type Identity struct {
	WWN       string `json:"wwn,omitempty"`
	Serial    string `json:"serial,omitempty"`
	Size      int64  `json:"size,omitempty"`
	BlockSize uint32 `json:"block_size,omitempty"`
	// Target and Number are recorded together (Number 0 is a LUN): a
	// state file without Target recorded neither.
	Target string `json:"target,omitempty"`
	Number uint16 `json:"number"`
}

// Check fails when got, the LUN just opened, is not the LUN id recorded:
// a WWN, serial, size, block size, target or LUN number that was recorded
// and differs. Size and block size alone tell nothing: a record without a
// WWN or serial must have the target and LUN number, and fails otherwise
// (ErrUnidentified).
func (id Identity) Check(got Identity) error {
	if id.WWN == "" && id.Serial == "" && id.Target == "" {
		return fmt.Errorf("%w: recorded no WWN, serial or target and LUN", ErrUnidentified)
	}
	var diffs []string
	if id.WWN != "" && id.WWN != got.WWN {
		diffs = append(diffs, fmt.Sprintf("WWN %q, this LUN %q", id.WWN, got.WWN))
	}
	if id.Serial != "" && id.Serial != got.Serial {
		diffs = append(diffs, fmt.Sprintf("serial %q, this LUN %q", id.Serial, got.Serial))
	}
	if id.Size != 0 && id.Size != got.Size {
		diffs = append(diffs, fmt.Sprintf("size %d, this LUN %d", id.Size, got.Size))
	}
	if id.BlockSize != 0 && id.BlockSize != got.BlockSize {
		diffs = append(diffs, fmt.Sprintf("block size %d, this LUN %d", id.BlockSize, got.BlockSize))
	}
	if id.Target != "" && (id.Target != got.Target || id.Number != got.Number) {
		diffs = append(diffs, fmt.Sprintf("%s LUN %d, this LUN %s LUN %d", id.Target, id.Number, got.Target, got.Number))
	}
	if len(diffs) > 0 {
		return fmt.Errorf("%w: recorded %s", ErrOtherLUN, strings.Join(diffs, "; "))
	}
	return nil
}

// ErrOtherLUN is wrapped when a recorded device shows another LUN.
var ErrOtherLUN = errors.New("the device shows another LUN")

// ErrUnidentified is wrapped when a record does not say which LUN its
// device shows.
var ErrUnidentified = errors.New("cannot tell which LUN the device shows")

// StatePath is the state file of volume name.
func StatePath(name string) string { return filepath.Join(RunDir, name+".state") }

// WriteState records the device of volume name.
func WriteState(name string, st State) error {
	if err := os.MkdirAll(RunDir, 0o755); err != nil {
		return fmt.Errorf("volume state: %w", err)
	}
	b, _ := json.Marshal(st)
	tmp := StatePath(name) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("volume state: %w", err)
	}
	return os.Rename(tmp, StatePath(name))
}

// ReadState returns the recorded device of volume name, if any.
func ReadState(name string) (State, bool) {
	b, err := os.ReadFile(StatePath(name))
	if err != nil {
		return State{}, false
	}
	var st State
	if json.Unmarshal(b, &st) != nil {
		return State{}, false
	}
	return st, true
}

// RemoveState forgets the device of volume name (after a clean detach).
func RemoveState(name string) { _ = os.Remove(StatePath(name)) }

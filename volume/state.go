package volume

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// State is what a volume leaves in RunDir so that the next attach of the
// same name finds its device: a ublk device survives its server (user
// recovery) and is taken over instead of created anew.
type State struct {
	Frontend string `json:"frontend"`
	ID       int    `json:"id"`
	Device   string `json:"device"`
}

func statePath(name string) string { return filepath.Join(RunDir, name+".state") }

// WriteState records the device of volume name.
func WriteState(name string, st State) error {
	if err := os.MkdirAll(RunDir, 0o755); err != nil {
		return fmt.Errorf("volume state: %w", err)
	}
	b, _ := json.Marshal(st)
	tmp := statePath(name) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("volume state: %w", err)
	}
	return os.Rename(tmp, statePath(name))
}

// ReadState returns the recorded device of volume name, if any.
func ReadState(name string) (State, bool) {
	b, err := os.ReadFile(statePath(name))
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
func RemoveState(name string) { _ = os.Remove(statePath(name)) }

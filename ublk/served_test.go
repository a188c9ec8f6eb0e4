package ublk

import (
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/iser-attach/iser-attach/internal/proc/proctest"
)

// A live device whose server is a live process is neither taken over nor
// removed; one whose server is gone (or a zombie, its files closed), or a
// quiesced one, may be.
func TestCheckUnserved(t *testing.T) {
	live := exec.Command("sleep", "60")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = live.Process.Kill(); _ = live.Wait() }()
	zombie, gone := proctest.Zombie(t), proctest.Exited(t)
	for _, tc := range []struct {
		name   string
		info   DevInfo
		served bool
	}{
		{"live, server alive", DevInfo{DevID: 2, State: stateLive, ServerPID: int32(live.Process.Pid)}, true},
		{"live, server is us", DevInfo{DevID: 2, State: stateLive, ServerPID: int32(os.Getpid())}, false},
		{"live, server a zombie", DevInfo{DevID: 2, State: stateLive, ServerPID: int32(zombie)}, false},
		{"live, server gone", DevInfo{DevID: 2, State: stateLive, ServerPID: int32(gone)}, false},
		{"quiesced", DevInfo{DevID: 2, State: stateQuiesced, ServerPID: int32(live.Process.Pid)}, false},
		{"dead", DevInfo{DevID: 2, State: stateDead, ServerPID: int32(live.Process.Pid)}, false},
	} {
		err := checkUnserved(tc.info)
		if tc.served != errors.Is(err, ErrServed) || (!tc.served && err != nil) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

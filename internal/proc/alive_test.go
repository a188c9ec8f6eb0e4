package proc

import (
	"os"
	"strconv"
	"testing"

	"github.com/iser-attach/iser-attach/internal/proc/proctest"
)

func TestAlive(t *testing.T) {
	for _, tc := range []struct {
		name string
		pid  int
		want bool
	}{
		{"this process", os.Getpid(), true},
		{"a thread of it", otherThread(t), true},
		{"a zombie", proctest.Zombie(t), false},
		{"exited and reaped", proctest.Exited(t), false},
		{"pid 0", 0, false},
		{"negative", -1, false},
	} {
		if got := Alive(tc.pid); got != tc.want {
			t.Errorf("%s (pid %d): Alive = %v, want %v", tc.name, tc.pid, got, tc.want)
		}
	}
}

// otherThread returns a thread id of this process other than its pid when
// it has one (the Go runtime starts several), else the pid.
func otherThread(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil && tid != os.Getpid() {
			return tid
		}
	}
	return os.Getpid()
}

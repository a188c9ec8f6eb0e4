package proc

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

func TestAlive(t *testing.T) {
	zombie := exec.Command("true")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = zombie.Wait() }()
	// Not reaped: /proc keeps it, as a zombie, once it has exited.
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(zombie.Process.Pid) + "/stat")
		if len(b) > 0 && !Alive(zombie.Process.Pid) {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("true(1) never showed as a zombie")
		}
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		pid  int
		want bool
	}{
		{"this process", os.Getpid(), true},
		{"a thread of it", otherThread(t), true},
		{"exited and reaped", gone.Process.Pid, false},
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

package proctest

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Zombie returns the pid of a child that has exited and is not reaped
// yet: /proc shows it in state Z. The test's cleanup reaps it.
func Zombie(t testing.TB) int {
	t.Helper()
	c := exec.Command("true")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Wait() })
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(c.Process.Pid) + "/stat")
		// pid (comm) S ...: the state follows the last ')'.
		if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'Z' {
			return c.Process.Pid
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("proctest: true(1) never became a zombie")
		}
	}
}

// Exited returns the pid of a child that has exited and been reaped.
func Exited(t testing.TB) int {
	t.Helper()
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	return c.Process.Pid
}

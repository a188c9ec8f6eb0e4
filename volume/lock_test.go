package volume

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

func TestLockRefusesSecondAttach(t *testing.T) {
	tempRunDir(t)
	first, err := AcquireLock("db")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	_, err = AcquireLock("db")
	var ae *AttachedError
	if !errors.As(err, &ae) || ae.PID != os.Getpid() || ae.Device != "" {
		t.Fatalf("second lock while attaching: %v", err)
	}
	if err := first.SetDevice("/dev/ublkb3"); err != nil {
		t.Fatal(err)
	}
	err = CheckNotAttached(ctx2(t), "db")
	want := "volume db is already attached by pid " + strconv.Itoa(os.Getpid()) + " (/dev/ublkb3)"
	if err == nil || err.Error() != want {
		t.Fatalf("CheckNotAttached: %v, want %q", err, want)
	}
	// Another volume is not affected.
	other, err := AcquireLock("logs")
	if err != nil {
		t.Fatal(err)
	}
	other.Close()
	first.Close()
	first.Close() // idempotent
	again, err := AcquireLock("db")
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	again.Close()
}

// A process that holds the lock and dies releases it: the kernel drops a
// flock with the last descriptor.
func TestLockReleasedWhenHolderDies(t *testing.T) {
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Skip("flock(1) is missing")
	}
	tempRunDir(t)
	if err := os.WriteFile(lockPath("db"), []byte("4242 /dev/ublkb9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	holder := exec.Command(flock, "--exclusive", lockPath("db"), "sh", "-c", "echo locked; exec sleep 60")
	// flock(1) forks the command, which inherits the lock: kill them both.
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	kill := func() { _ = syscall.Kill(-holder.Process.Pid, syscall.SIGKILL); _ = holder.Wait() }
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer kill()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "locked\n" {
		t.Fatalf("flock(1): %q %v", line, err)
	}
	_, err = AcquireLock("db")
	if err == nil || err.Error() != "volume db is already attached by pid 4242 (/dev/ublkb9)" {
		t.Fatalf("locked by another process: %v", err)
	}
	kill()
	// flock(1)'s child, reaped by init, may take a moment to go.
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		l, err := AcquireLock("db")
		if err == nil {
			l.Close()
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("lock of a dead holder: %v", err)
		}
	}
}

func TestCheckNotAttachedAsksTheSocket(t *testing.T) {
	tempRunDir(t)
	if err := CheckNotAttached(ctx2(t), "db"); err != nil {
		t.Fatalf("nothing attached: %v", err)
	}
	// A server without the lock (an older version) still answers.
	srv, err := ListenControl("db", &fakeController{st: Status{Name: "db", Device: "/dev/nbd2", PID: 77}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	err = CheckNotAttached(ctx2(t), "db")
	if err == nil || err.Error() != "volume db is already attached by pid 77 (/dev/nbd2)" {
		t.Fatalf("CheckNotAttached: %v", err)
	}
}

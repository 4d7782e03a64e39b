package children

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestKillAll(t *testing.T) {
	// A group whose leader has a child of its own, as `sh -c trainer`.
	cmd := exec.Command("/bin/sh", "-c", "sleep 60 & wait")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	remove := Add(pgid)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	KillAll()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the group was not killed")
	}
	remove()
	// Nothing of the group is left.
	time.Sleep(100 * time.Millisecond)
	if err := syscall.Kill(-pgid, 0); err == nil {
		t.Fatal("a process of the group survived")
	}
	if len(groups) != 0 {
		t.Fatalf("groups %v after remove", groups)
	}
}

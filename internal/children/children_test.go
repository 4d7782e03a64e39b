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
	// Nothing of the group is left. The orphaned sleep is reaped by init
	// some time after its SIGKILL (until then it is a zombie that kill(2)
	// still finds), so wait for that rather than look once.
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(-pgid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatal("a process of the group survived")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(groups) != 0 {
		t.Fatalf("groups %v after remove", groups)
	}
}

package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/whalerun/whale/models/modeltest"
)

// Another process of whale's user (an agent or model code run without a
// sandbox) cannot read whale's environment from /proc: whale makes itself
// undumpable. Both run as nobody here (the test must be root to arrange
// that); a plain child of nobody reads its own environ, as a control.
func TestEnvironHiddenFromSameUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run whale and the reader as another user")
	}
	// A copy of the test binary nobody may run.
	dir, err := os.MkdirTemp("/var/tmp", "whale-environ-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "whale.test")
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err == nil {
		_, err = io.Copy(dst, src)
		dst.Close()
	}
	src.Close()
	if err != nil {
		t.Fatal(err)
	}
	tasks := filepath.Join(dir, "tasks.jsonl")
	if err := os.WriteFile(tasks, []byte(chessTasks), 0o644); err != nil {
		t.Fatal(err)
	}
	called := make(chan struct{}, 1)
	srv := modeltest.NewServer(t, func(*modeltest.Request) modeltest.Reply {
		select {
		case called <- struct{}{}:
		default:
		}
		return modeltest.Reply{Content: "<move>e2e4</move>", Delay: time.Hour}
	})
	nobody := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, NoSetGroups: true}}
	const secret = "whale-test-secret-3f9a1c"
	cmd := exec.Command(bin, "-test.run=^$", "--", "harness", "run", "h0", "--domain", "chess", "--tasks", tasks, "--task", "long",
		"--endpoint", srv.URL, "--model", "stalled")
	cmd.Env = []string{"WHALE_TEST_SIGNALS=main", "AWS_SECRET_ACCESS_KEY=" + secret, "HOME=" + dir}
	cmd.SysProcAttr = nobody
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	select {
	case <-called:
	case <-time.After(60 * time.Second):
		t.Fatalf("whale never called the model; stderr:\n%s", stderr.String())
	}
	read := func(path string) (string, error) {
		c := exec.Command("/bin/cat", path)
		c.SysProcAttr = nobody
		out, err := c.CombinedOutput()
		return string(out), err
	}
	if out, err := read("/proc/self/environ"); err != nil {
		t.Fatalf("control: nobody cannot read its own environ: %v %s", err, out)
	}
	out, err := read("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/environ")
	if err == nil || strings.Contains(out, secret) {
		t.Fatalf("another process of whale's user read whale's environment (err %v): %q", err, out)
	}
}

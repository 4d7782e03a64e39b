package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/whalerun/whale/models/modeltest"
)

// With WHALE_TEST_SIGNALS set the test binary is a child of the tests
// below, before TestMain runs: "main" runs main() itself (signal handling
// included) on the command line after "--"; "stuck" installs main's
// signal handling and then ignores the cancellation, as a command stuck
// in a long computation would.
func init() {
	switch os.Getenv("WHALE_TEST_SIGNALS") {
	case "main":
		os.Args = append([]string{"whale"}, os.Args[slices.Index(os.Args, "--")+1:]...)
		main()
	case "stuck":
		ctx, stop := signalContext(context.Background(), os.Stderr)
		defer stop()
		fmt.Println("ready")
		<-ctx.Done()
		fmt.Println("cancelled:", context.Cause(ctx))
		time.Sleep(time.Hour)
		os.Exit(0)
	}
}

// child is the test binary started as whale (mode "main") or as a stuck
// command (mode "stuck"), its stdout read line by line.
type child struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr strings.Builder
	done   chan error
}

func startChild(t *testing.T, mode string, args ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), "WHALE_TEST_SIGNALS="+mode)
	c := &child{cmd: cmd, lines: make(chan string, 100), done: make(chan error, 1)}
	cmd.Stderr = &c.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		io.Copy(io.Discard, out)
		c.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-c.done
	})
	return c
}

// waitLine waits for a line of stdout that starts with prefix.
func (c *child) waitLine(t *testing.T, prefix string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				t.Fatalf("the child ended before printing %q; stderr:\n%s", prefix, c.stderr.String())
			}
			if strings.HasPrefix(line, prefix) {
				return
			}
		case <-deadline:
			t.Fatalf("no line %q within %v; stderr:\n%s", prefix, within, c.stderr.String())
		}
	}
}

// wait waits for the child to exit and returns its exit code.
func (c *child) wait(t *testing.T, within time.Duration) int {
	t.Helper()
	go func() {
		for range c.lines {
		}
	}()
	select {
	case err := <-c.done:
		c.done <- err // for the cleanup
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(within):
		t.Fatalf("the child did not exit within %v; stderr:\n%s", within, c.stderr.String())
		return -1
	}
}

// A command that does not stop when cancelled (stuck in a computation)
// is ended by a second signal at once, with the shell's code for death by
// that signal.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGTERM, 143}, {syscall.SIGINT, 130}} {
		t.Run(tc.sig.String(), func(t *testing.T) {
			c := startChild(t, "stuck")
			c.waitLine(t, "ready", 30*time.Second)
			c.cmd.Process.Signal(tc.sig)
			c.waitLine(t, "cancelled:", 5*time.Second)
			start := time.Now()
			c.cmd.Process.Signal(tc.sig)
			if code := c.wait(t, 5*time.Second); code != tc.code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tc.code, c.stderr.String())
			}
			if el := time.Since(start); el > 2*time.Second {
				t.Errorf("exited %v after the second signal", el)
			}
			for _, want := range []string{"stopping (send it again to exit at once)", "again: exiting"} {
				if !strings.Contains(c.stderr.String(), want) {
					t.Errorf("stderr does not say %q:\n%s", want, c.stderr.String())
				}
			}
		})
	}
}

// The first signal cancels a real command promptly: `whale harness run`
// waiting on a model that never answers returns within seconds of a
// SIGTERM, and a second signal is not needed.
func TestFirstSignalCancelsCommand(t *testing.T) {
	called := make(chan struct{}, 1)
	srv := modeltest.NewServer(t, func(*modeltest.Request) modeltest.Reply {
		select {
		case called <- struct{}{}:
		default:
		}
		return modeltest.Reply{Content: "<move>e2e4</move>", Delay: time.Hour}
	})
	tasks := writeFile(t, "tasks.jsonl", chessTasks)
	c := startChild(t, "main", "harness", "run", "h0", "--domain", "chess", "--tasks", tasks, "--task", "long",
		"--endpoint", srv.URL, "--model", "stalled")
	select {
	case <-called:
	case <-time.After(60 * time.Second):
		t.Fatalf("the model was never called; stderr:\n%s", c.stderr.String())
	}
	start := time.Now()
	c.cmd.Process.Signal(syscall.SIGTERM)
	code := c.wait(t, 15*time.Second)
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("exited %v after SIGTERM", el)
	}
	if code == exitOK || code == 143 {
		t.Errorf("exit code %d, want the command's failure (it was cancelled, and the second signal never came)", code)
	}
	t.Logf("exit code %d; stderr:\n%s", code, c.stderr.String())
	if !strings.Contains(c.stderr.String(), "stopping") {
		t.Errorf("stderr does not say it is stopping:\n%s", c.stderr.String())
	}
}

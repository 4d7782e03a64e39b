package finetune

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/whalerun/whale/internal/children"
)

// tailLines is how many of the last output lines an error shows.
const tailLines = 20

// maxLine bounds one logged line; a trainer that prints megabytes without
// a newline is cut, not buffered.
const maxLine = 64 << 10

// checkCommand checks the command backend's settings.
func (c Config) checkCommand() []error {
	if strings.TrimSpace(c.Command) == "" {
		return []error{errors.New("command is empty: give the trainer to run, e.g. `python3 jobs/trainers/train_sft.py`")}
	}
	return nil
}

// trainCommand is the command backend: it runs the trainer command with
// the WHALE_* environment and keeps the default model id.
func (st *Stage) trainCommand(ctx context.Context, j *job) (string, error) {
	argv := TrainerArgv(j.cfg)
	j.log.Info("finetune: starting trainer", "argv", argv, "examples", j.examples, "base", j.base, "output", j.outDir)
	if err := st.runCommand(ctx, j.log, "trainer", argv, environ(j.cfg.Env, j.env)); err != nil {
		return "", err
	}
	return j.modelID, nil
}

// TrainerArgv is the command line the trainer runs as.
func TrainerArgv(cfg Config) []string {
	sh := []string{"/bin/sh", "-c", cfg.Command}
	if !cfg.Srun {
		return sh
	}
	return append(append([]string{"srun"}, cfg.SrunArgs...), sh...)
}

// CommandError is a trainer or reload command that failed: its exit code
// (-1 when it was killed by a signal) and its last lines of output.
type CommandError struct {
	What     string // "trainer" or "reload command"
	ExitCode int
	Signal   string // set when killed by a signal
	Tail     []string
	Err      error
}

func (e *CommandError) Error() string {
	var b strings.Builder
	if e.Signal != "" {
		fmt.Fprintf(&b, "finetune: %s killed by %s", e.What, e.Signal)
	} else {
		fmt.Fprintf(&b, "finetune: %s exited with code %d", e.What, e.ExitCode)
	}
	if len(e.Tail) > 0 {
		fmt.Fprintf(&b, "; its last %d lines:\n  %s", len(e.Tail), strings.Join(e.Tail, "\n  "))
	} else {
		b.WriteString(" and printed nothing")
	}
	return b.String()
}

func (e *CommandError) Unwrap() error { return e.Err }

// runCommand runs argv in its own process group with output streamed line
// by line to log and st.Stdout. Cancelling ctx sends SIGTERM to the group
// and SIGKILL after the grace period; when the command ends, whatever is
// left of its group is killed, so no helper outlives it.
func (st *Stage) runCommand(ctx context.Context, log *slog.Logger, what string, argv []string, env []string) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	if st.CommandDir != "" {
		if fi, err := os.Stat(st.CommandDir); err == nil && fi.IsDir() {
			cmd.Dir = st.CommandDir
		} else {
			log.Warn("finetune: the directory whale init ran in is not on this machine; the command runs in the current one",
				"what", what, "dir", st.CommandDir)
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	grace := st.KillGrace
	if grace <= 0 {
		grace = 10 * time.Second
	}
	cmd.WaitDelay = grace
	lw := &lineWriter{log: log, what: what, out: st.Stdout}
	cmd.Stdout = lw
	cmd.Stderr = lw

	if err := cmd.Start(); err != nil {
		return fmt.Errorf("finetune: start %s %q: %w", what, argv, err)
	}
	pgid := cmd.Process.Pid
	// Killed with whale should whale exit at once (a second signal).
	defer children.Add(pgid)()
	// Escalate to SIGKILL of the whole group when SIGTERM was not enough.
	done := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
			syscall.Kill(-pgid, syscall.SIGKILL)
		case <-done:
		}
	})
	err := cmd.Wait()
	close(done)
	stop()
	syscall.Kill(-pgid, syscall.SIGKILL)
	lw.flush()

	if ctx.Err() != nil {
		return fmt.Errorf("finetune: %s stopped: %w", what, context.Cause(ctx))
	}
	if err == nil {
		return nil
	}
	ce := &CommandError{What: what, ExitCode: -1, Tail: lw.tail(), Err: err}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		ce.ExitCode = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			ce.Signal = ws.Signal().String()
		}
	} else if errors.Is(err, exec.ErrWaitDelay) {
		// The command exited but something it started kept its output
		// open past the grace period; the group is killed above.
		if cmd.ProcessState != nil && cmd.ProcessState.Success() {
			return nil
		}
		if cmd.ProcessState != nil {
			ce.ExitCode = cmd.ProcessState.ExitCode()
		}
	}
	return ce
}

// lineWriter splits output into lines (at \n and at the \r of progress
// bars), logs each and copies it to out, and keeps the last tailLines.
type lineWriter struct {
	log  *slog.Logger
	what string
	out  io.Writer

	mu   sync.Mutex
	buf  []byte
	last []string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexAny(p, "\r\n")
		if i < 0 {
			room := maxLine - len(w.buf)
			if len(p) > room {
				w.buf = append(w.buf, p[:room]...)
				w.emit()
				p = p[room:]
				continue
			}
			w.buf = append(w.buf, p...)
			break
		}
		w.buf = append(w.buf, p[:min(i, maxLine-len(w.buf))]...)
		w.emit()
		p = p[i+1:]
	}
	return n, nil
}

func (w *lineWriter) emit() {
	line := strings.TrimRight(string(w.buf), " \t")
	w.buf = w.buf[:0]
	if line == "" {
		return
	}
	w.log.Info(w.what, "line", line)
	if w.out != nil {
		io.WriteString(w.out, line+"\n")
	}
	w.last = append(w.last, line)
	if len(w.last) > tailLines {
		w.last = w.last[len(w.last)-tailLines:]
	}
}

func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.emit()
}

func (w *lineWriter) tail() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.last...)
}

package mathdomain

import (
	"context"
	"time"
	"unicode/utf8"
)

// CodeRunner runs one Python program for the code-interpreter tool.
//
// A program that fails (raises, exits non-zero, runs out of time or
// memory) is a normal outcome: Run returns a RunResult saying so and a nil
// error, so the episode loop can show the failure to the model. Run returns
// an error only when the tool could not run the program at all, or when
// ctx ended first (then the error wraps ctx.Err()). Implementations are
// safe for concurrent use.
type CodeRunner interface {
	Run(ctx context.Context, code string) (RunResult, error)
}

// Status values of a RunResult.
const (
	// StatusOK: the program exited with code 0.
	StatusOK = "ok"
	// StatusError: the program exited non-zero (an uncaught exception, a
	// syntax error, sys.exit(1)) or was killed by a signal.
	StatusError = "error"
	// StatusTimeout: the program ran past the time limit and was killed.
	StatusTimeout = "timeout"
	// StatusOOM: the program ran out of memory (MemoryError under the
	// address-space limit, or killed by the kernel for memory).
	StatusOOM = "oom"
)

// RunResult is what a program printed and how it ended.
type RunResult struct {
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// ExitCode is the process exit code; a process killed by signal N has
	// -N, as Python's subprocess and SandboxFusion report it.
	ExitCode int    `json:"exit_code"`
	Status   string `json:"status"`
	// Duration is the run time as the runner measured it (SandboxFusion:
	// the service's execution_time).
	Duration time.Duration `json:"duration_ns"`
	// Truncated reports that Stdout or Stderr was cut at the output limit.
	Truncated bool `json:"truncated"`
}

// DefaultMaxOutputBytes is the default cap on each of stdout and stderr.
const DefaultMaxOutputBytes = 64 << 10

// truncate cuts s to at most max bytes without splitting a UTF-8 sequence.
func truncate(s string, max int) (string, bool) {
	if max <= 0 || len(s) <= max {
		return s, false
	}
	cut := max
	for cut > 0 && cut > max-utf8.UTFMax && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut], true
}

// capWriter keeps the first max bytes written to it and counts the rest,
// so a program printing forever costs bounded memory.
type capWriter struct {
	buf     []byte
	max     int
	dropped int64
}

func (w *capWriter) Write(p []byte) (int, error) {
	room := w.max - len(w.buf)
	if room > len(p) {
		room = len(p)
	}
	if room > 0 {
		w.buf = append(w.buf, p[:room]...)
	}
	w.dropped += int64(len(p) - room)
	return len(p), nil
}

// text returns what was kept and whether anything was dropped.
func (w *capWriter) text() (string, bool) {
	if w.dropped == 0 {
		return string(w.buf), false
	}
	return cutPartialRune(string(w.buf)), true
}

// cutPartialRune drops an incomplete UTF-8 sequence the cap left at the end.
func cutPartialRune(s string) string {
	for back := 1; back <= utf8.UTFMax && back <= len(s); back++ {
		i := len(s) - back
		if utf8.RuneStart(s[i]) {
			if !utf8.FullRuneInString(s[i:]) {
				return s[:i]
			}
			break
		}
	}
	return s
}

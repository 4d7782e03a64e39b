package mathdomain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Defaults shared by the runners.
const (
	DefaultRunTimeout    = 10 * time.Second
	DefaultMemoryLimitMB = 1024
	// maxFileBytes caps each file a program writes (RLIMIT_FSIZE), so a
	// runaway loop cannot fill the disk.
	maxFileBytes = 64 << 20
)

// LocalPythonOptions configure a LocalPython runner. Zero values mean the
// defaults.
type LocalPythonOptions struct {
	// Python is the interpreter; default "python3" from PATH. It is
	// resolved once to its real executable (sys.executable), so shims such
	// as pyenv's, which need the parent's environment, still work.
	Python string
	// Timeout is the wall-clock limit of one run; default 10s.
	Timeout time.Duration
	// MemoryLimitMB caps the program's address space (RLIMIT_AS); default
	// 1024, negative for no limit. Note it counts virtual memory: threaded
	// numeric libraries reserve a lot, which is why the environment pins
	// them to one thread.
	MemoryLimitMB int
	// MaxOutputBytes caps each of stdout and stderr; default 64 KiB.
	MaxOutputBytes int
	// AllowNetwork runs programs without a network namespace, so they can
	// reach the network. Without it, NewLocalPython fails where
	// unshare --net cannot be used.
	AllowNetwork bool
	// Env adds "KEY=value" entries to the minimal environment the program
	// gets. Nothing of the parent's environment is passed on.
	Env []string
	// TempDir is where the per-run working directories are made; default
	// os.TempDir().
	TempDir string
	// Log receives one line per run that fails to start; nil means
	// slog.Default().
	Log *slog.Logger
}

// LocalPython runs programs with the local python3. Each run gets a fresh
// temporary working directory (removed afterwards), a minimal environment,
// an address-space limit, a time limit enforced by killing its whole
// process group, and, unless AllowNetwork, a network namespace of its own
// (unshare --net), where only a loopback device that is down exists.
//
// Children the program starts stay in its process group and are killed
// with it; a child that leaves the group (setsid) and ignores its closed
// pipes can outlive the run. Use SandboxFusion where that matters.
type LocalPython struct {
	opts    LocalPythonOptions
	python  string
	isolate []string // command prefix that enters the network namespace
}

// preamble sets the resource limits and then replaces itself with the
// program, so the program's tracebacks show only its own frames.
const preamble = `import os, resource, sys
mem, fsize = int(sys.argv[1]), int(sys.argv[2])
if mem > 0:
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
os.execv(sys.executable, [sys.executable, "main.py"])
`

// NewLocalPython checks the interpreter and the network isolation once, so
// a machine that cannot run programs safely fails here, not mid-episode.
func NewLocalPython(ctx context.Context, opts LocalPythonOptions) (*LocalPython, error) {
	if opts.Python == "" {
		opts.Python = "python3"
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultRunTimeout
	}
	if opts.MemoryLimitMB == 0 {
		opts.MemoryLimitMB = DefaultMemoryLimitMB
	}
	if opts.MaxOutputBytes <= 0 {
		opts.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	for _, kv := range opts.Env {
		if !strings.Contains(kv, "=") {
			return nil, fmt.Errorf("local python: env entry %q is not KEY=value", kv)
		}
	}
	python, err := resolvePython(ctx, opts.Python)
	if err != nil {
		return nil, err
	}
	r := &LocalPython{opts: opts, python: python}
	if !opts.AllowNetwork {
		if r.isolate, err = probeNetns(ctx, python); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// resolvePython asks the interpreter for its real path. This one call runs
// with the parent's environment: it is our code, and shims need it.
func resolvePython(ctx context.Context, python string) (string, error) {
	path, err := exec.LookPath(python)
	if err != nil {
		return "", fmt.Errorf("local python: interpreter %q: %w", python, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		return "", fmt.Errorf("local python: run %s: %w", path, err)
	}
	exe := strings.TrimSpace(string(out))
	if exe == "" || !filepath.IsAbs(exe) {
		return "", fmt.Errorf("local python: %s reports no usable sys.executable (%q)", path, exe)
	}
	return exe, nil
}

// probeNetns finds a way to enter a new network namespace: directly (root,
// or CAP_SYS_ADMIN) or through a user namespace (unprivileged, where the
// kernel allows it).
func probeNetns(ctx context.Context, python string) ([]string, error) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		return nil, fmt.Errorf("local python: no network isolation: unshare (util-linux) not found (%v); "+
			"install util-linux, use a SandboxFusion service, or set AllowNetwork to run code with network access", err)
	}
	candidates := [][]string{
		{unshare, "--net", "--"},
		{unshare, "--user", "--map-root-user", "--net", "--"},
	}
	var failures []string
	for _, prefix := range candidates {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cmd := exec.CommandContext(pctx, prefix[0], append(prefix[1:], python, "-c", "")...)
		cmd.Env = []string{}
		out, err := cmd.CombinedOutput()
		cancel()
		if err == nil {
			return prefix, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("local python: probe network isolation: %w", ctx.Err())
		}
		failures = append(failures, fmt.Sprintf("%s: %v %s", strings.Join(prefix[1:len(prefix)-1], " "), err, strings.TrimSpace(string(out))))
	}
	return nil, fmt.Errorf("local python: no network isolation: unshare failed (%s); run as root, allow unprivileged "+
		"user namespaces, use a SandboxFusion service, or set AllowNetwork to run code with network access",
		strings.Join(failures, "; "))
}

// Python is the interpreter the runner uses.
func (r *LocalPython) Python() string { return r.python }

// Isolated reports whether programs run in their own network namespace.
func (r *LocalPython) Isolated() bool { return r.isolate != nil }

// Run runs code as main.py in a fresh directory. See CodeRunner.
func (r *LocalPython) Run(ctx context.Context, code string) (RunResult, error) {
	if err := ctx.Err(); err != nil {
		return RunResult{}, fmt.Errorf("local python: %w", err)
	}
	dir, err := os.MkdirTemp(r.opts.TempDir, "whale-py-")
	if err != nil {
		return RunResult{}, fmt.Errorf("local python: make work dir: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "main.py"), []byte(code), 0o600); err != nil {
		return RunResult{}, fmt.Errorf("local python: write %s: %w", filepath.Join(dir, "main.py"), err)
	}

	memBytes := int64(-1)
	if r.opts.MemoryLimitMB > 0 {
		memBytes = int64(r.opts.MemoryLimitMB) << 20
	}
	// The preamble needs no site packages; -S -E saves most of a Python
	// start-up, and the program itself starts normally.
	args := append(append([]string{}, r.isolate...), r.python, "-S", "-E", "-c", preamble,
		strconv.FormatInt(memBytes, 10), strconv.FormatInt(maxFileBytes, 10))

	runCtx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	cmd := exec.CommandContext(runCtx, args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = r.env(dir)
	stdout := &capWriter{max: r.opts.MaxOutputBytes}
	stderr := &capWriter{max: r.opts.MaxOutputBytes}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// Own process group, so the kill reaches every child the program
	// started; the group dies with us if whale is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A child holding the output pipes open must not hold up Wait.
	cmd.WaitDelay = time.Second

	start := time.Now()
	if err := cmd.Start(); err != nil {
		r.opts.Log.Warn("local python: start failed", "python", r.python, "err", err)
		return RunResult{}, fmt.Errorf("local python: start %s: %w", args[0], err)
	}
	waitErr := cmd.Wait()
	elapsed := time.Since(start)
	// Children left behind by a program that exited normally.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)

	res := RunResult{Duration: elapsed}
	var outCut, errCut bool
	res.Stdout, outCut = stdout.text()
	res.Stderr, errCut = stderr.text()
	res.Truncated = outCut || errCut

	var exitErr *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return res, fmt.Errorf("local python: %w", ctx.Err())
	case runCtx.Err() != nil:
		res.Status, res.ExitCode = StatusTimeout, exitCode(cmd.ProcessState)
		return res, nil
	case waitErr == nil:
		res.Status = StatusOK
		return res, nil
	case errors.As(waitErr, &exitErr), errors.Is(waitErr, exec.ErrWaitDelay):
		res.ExitCode = exitCode(cmd.ProcessState)
		res.Status = classifyExit(res.ExitCode, res.Stderr)
		return res, nil
	}
	return res, fmt.Errorf("local python: wait: %w", waitErr)
}

// env is the program's whole environment: enough for Python to start and
// to behave the same on every machine, and nothing of the parent's.
func (r *LocalPython) env(dir string) []string {
	env := []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + dir,
		"TMPDIR=" + dir,
		"LANG=C.UTF-8",
		"LC_ALL=C.UTF-8",
		"PYTHONUTF8=1",
		"PYTHONIOENCODING=utf-8",
		"PYTHONDONTWRITEBYTECODE=1",
		"PYTHONHASHSEED=0",
		"MPLBACKEND=Agg",
		"OMP_NUM_THREADS=1",
		"OPENBLAS_NUM_THREADS=1",
		"MKL_NUM_THREADS=1",
	}
	return append(env, r.opts.Env...)
}

// exitCode is the exit code, or -N for a process killed by signal N.
func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -int(ws.Signal())
	}
	return ps.ExitCode()
}

// classifyExit names how a program that did not succeed ended.
func classifyExit(code int, stderr string) string {
	if code == 0 {
		return StatusOK
	}
	if isOOM(code, stderr) {
		return StatusOOM
	}
	return StatusError
}

// isOOM recognises a program that ran out of memory: Python's MemoryError
// as the final line of a traceback, an allocation failure reported by the
// runtime, or a SIGKILL we did not send (the kernel's OOM killer).
func isOOM(code int, stderr string) bool {
	if code == -int(syscall.SIGKILL) || code == 128+int(syscall.SIGKILL) {
		return true
	}
	last := lastLine(stderr)
	return strings.HasPrefix(last, "MemoryError") ||
		strings.Contains(stderr, "Cannot allocate memory") ||
		strings.Contains(stderr, "std::bad_alloc")
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n\r\t ")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return strings.TrimSpace(s)
}

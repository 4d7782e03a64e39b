package mathdomain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Defaults shared by the runners, and the local sandbox's limits.
const (
	DefaultRunTimeout    = 10 * time.Second
	DefaultMemoryLimitMB = 1024
	// DefaultMaxProcesses caps the processes and threads of one run
	// (RLIMIT_NPROC), so a fork bomb stops there. Linux counts it per
	// user namespace, so per sandbox, from 5.14 on; older kernels count
	// every process of the sandbox user, so runs at once share the cap
	// (the probe warns).
	DefaultMaxProcesses = 32
	// DefaultMaxOpenFiles caps the open files of each process
	// (RLIMIT_NOFILE).
	DefaultMaxOpenFiles = 256
	// DefaultDiskLimitMB is the size of the private /tmp a run writes to
	// (a tmpfs), and the largest file it may write (RLIMIT_FSIZE).
	DefaultDiskLimitMB = 64
	// shmBytes is the size of the sandbox's /dev/shm (Python's
	// multiprocessing keeps its semaphores there).
	shmBytes = 16 << 20
	// sandboxID is the uid and gid programs run as (nobody). When whale
	// runs as root it also starts bwrap as this user, so the kernel
	// applies RLIMIT_NPROC and file permissions as to a normal user.
	sandboxID = 65534
	// workDir is the program's working directory, HOME and TMPDIR: the
	// private tmpfs.
	workDir = "/tmp"
)

// ErrNoSandbox marks a machine where LocalPython cannot isolate programs:
// no bubblewrap, or bubblewrap cannot make its namespaces here. The runner
// then refuses to run code at all; use a SandboxFusion service instead.
var ErrNoSandbox = errors.New("no sandbox for model-written code")

// LocalPythonOptions configure a LocalPython runner. Zero values mean the
// defaults.
type LocalPythonOptions struct {
	// Python is the interpreter. The default is "python3" from PATH, or
	// /usr/bin/python3 where that one cannot run in the sandbox (for
	// example a pyenv under /root, which the sandbox user cannot read).
	// It is resolved once to its real executable (sys.executable), so
	// shims such as pyenv's, which need the parent's environment, still
	// work; its installation prefixes are bound read-only into the sandbox.
	Python string
	// Timeout is the wall-clock limit of one run; default 10s. The CPU
	// time of each process is capped a little above it (RLIMIT_CPU).
	Timeout time.Duration
	// MemoryLimitMB caps each process's address space (RLIMIT_AS);
	// default 1024, negative for no limit. Note it counts virtual memory:
	// threaded numeric libraries reserve a lot, which is why the
	// environment pins them to one thread.
	MemoryLimitMB int
	// MaxProcesses caps the processes and threads of one run, the
	// sandbox's own init included (RLIMIT_NPROC); default 32.
	MaxProcesses int
	// MaxOpenFiles caps each process's open files (RLIMIT_NOFILE); default
	// 256.
	MaxOpenFiles int
	// DiskLimitMB is the size of the run's private /tmp and the largest
	// file it may write (RLIMIT_FSIZE); default 64.
	DiskLimitMB int
	// MaxOutputBytes caps each of stdout and stderr; default 64 KiB.
	MaxOutputBytes int
	// AllowNetwork shares the host's network namespace with programs, so
	// they can reach the network. The rest of the sandbox stays.
	AllowNetwork bool
	// Env adds "KEY=value" entries to the minimal environment the program
	// gets. Nothing of the parent's environment is passed on. The entries
	// appear on bwrap's command line: pass no secrets.
	Env []string
	// TempDir is where the program text is staged (one file per run,
	// removed at once); default os.TempDir(). The program never sees it.
	TempDir string
	// Log receives one line per run that fails to start; nil means
	// slog.Default().
	Log *slog.Logger
}

// LocalPython runs programs with a local python3 under bubblewrap. Each run
// gets its own user, mount, PID, network, IPC and UTS namespaces; a
// read-only view of /usr, the /lib links, the few files of /etc the dynamic
// loader needs and the interpreter's installation; a fresh proc of its own
// PID namespace; a private, size-limited /tmp as working directory; an
// empty environment but for a fixed set of variables; and limits on
// address space, CPU time, processes, open files and file size. It runs as
// uid 65534, and when whale is root bwrap itself is started as that user.
// The wall-clock limit kills bwrap, and with it the PID namespace: nothing
// the program started, setsid or not, outlives the run.
//
// NewLocalPython refuses (ErrNoSandbox) on a machine where this isolation
// cannot be had; there is no weaker fallback.
type LocalPython struct {
	opts   LocalPythonOptions
	python string   // the interpreter (its sys.executable)
	pyDirs []string // its installation, bound read-only
	bwrap  string
	cred   *syscall.Credential // set when whale is root: bwrap runs as nobody
}

// probes caches, per bwrap command line, whether the sandbox works here
// (nil) or why not, so a process checks each configuration once.
var probes sync.Map

// NewLocalPython finds the interpreter and checks once that it runs in the
// sandbox, so a machine that cannot run programs safely fails here, not
// mid-episode.
func NewLocalPython(ctx context.Context, opts LocalPythonOptions) (*LocalPython, error) {
	candidates := []string{opts.Python}
	if opts.Python == "" {
		candidates = []string{"python3", "/usr/bin/python3"}
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultRunTimeout
	}
	if opts.MemoryLimitMB == 0 {
		opts.MemoryLimitMB = DefaultMemoryLimitMB
	}
	if opts.MaxProcesses <= 0 {
		opts.MaxProcesses = DefaultMaxProcesses
	}
	if opts.MaxOpenFiles <= 0 {
		opts.MaxOpenFiles = DefaultMaxOpenFiles
	}
	if opts.DiskLimitMB <= 0 {
		opts.DiskLimitMB = DefaultDiskLimitMB
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

	var resolveErr error
	var failures []string
	seen := map[string]bool{}
	for _, name := range candidates {
		py, dirs, err := resolvePython(ctx, name)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			if resolveErr == nil {
				resolveErr = err
			}
			continue
		}
		if seen[py] {
			continue
		}
		seen[py] = true
		r, err := newSandboxed(opts, py, dirs)
		if err != nil {
			return nil, err
		}
		if err := r.probe(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("local python: probe the sandbox: %w", ctx.Err())
			}
			failures = append(failures, err.Error())
			continue
		}
		if name != candidates[0] {
			why := failures
			if resolveErr != nil {
				why = append(why, resolveErr.Error())
			}
			opts.Log.Warn("local python: python3 on PATH cannot run in the sandbox; using another interpreter",
				"python", py, "why", strings.Join(why, "; "))
		}
		return r, nil
	}
	if len(failures) == 0 {
		return nil, resolveErr
	}
	return nil, noSandbox(strings.Join(failures, "; "))
}

// noSandbox is the refusal: what failed, and the way out.
func noSandbox(why string) error {
	return fmt.Errorf("local python: %w: %s; model-written code runs only under bubblewrap "+
		"(Debian: apt-get install bubblewrap; it needs user namespaces, and an interpreter the sandbox user can read) "+
		"or in a SandboxFusion service (tools.sandbox: URL)", ErrNoSandbox, why)
}

// newSandboxed finds bwrap for a runner of py.
func newSandboxed(opts LocalPythonOptions, py string, dirs []string) (*LocalPython, error) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		return nil, noSandbox(fmt.Sprintf("bubblewrap (bwrap) is not on PATH (%v)", err))
	}
	r := &LocalPython{opts: opts, python: py, pyDirs: dirs, bwrap: bwrap}
	if os.Geteuid() == 0 {
		r.cred = &syscall.Credential{Uid: sandboxID, Gid: sandboxID, Groups: []uint32{}}
	}
	return r, nil
}

// resolvePython asks the interpreter for its real path and the directories
// of its installation. This one call runs with the parent's environment:
// it is our code, and shims need it.
func resolvePython(ctx context.Context, python string) (string, []string, error) {
	path, err := exec.LookPath(python)
	if err != nil {
		return "", nil, fmt.Errorf("local python: interpreter %q: %w", python, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "-c", `import os, sys
print(sys.executable)
print(os.path.dirname(os.path.realpath(sys.executable)))
for d in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
    print(os.path.realpath(d))`).Output()
	if err != nil {
		return "", nil, fmt.Errorf("local python: run %s: %w", path, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	exe := strings.TrimSpace(lines[0])
	if exe == "" || !filepath.IsAbs(exe) {
		return "", nil, fmt.Errorf("local python: %s reports no usable sys.executable (%q)", path, exe)
	}
	var dirs []string
	for _, d := range lines[1:] {
		dirs = append(dirs, strings.TrimSpace(d))
	}
	return exe, pythonDirs(dirs), nil
}

// pythonDirs keeps the directories that /usr does not already cover, each
// once and none inside another.
func pythonDirs(dirs []string) []string {
	sort.Strings(dirs) // a directory sorts before everything inside it
	keep := []string{"/usr"}
	for _, d := range dirs {
		if d == "" || !filepath.IsAbs(d) || slices.ContainsFunc(keep, func(k string) bool {
			return d == k || strings.HasPrefix(d, k+"/")
		}) {
			continue
		}
		keep = append(keep, d)
	}
	return keep[1:]
}

// tooBroad reports a directory that must not be bound whole: the root, the
// top-level system directories, the home directory or one above it.
func tooBroad(dir string) bool {
	switch dir {
	case "/", "/tmp", "/var", "/etc", "/home", "/root", "/opt", "/mnt", "/srv", "/proc", "/sys", "/dev", "/run":
		return true
	}
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		home = filepath.Clean(home)
		if dir == home || strings.HasPrefix(home, dir+"/") {
			return true
		}
	}
	return false
}

// probe runs a trivial program in the sandbox; the answer is cached per
// command line for the life of the process.
func (r *LocalPython) probe(ctx context.Context) error {
	for _, d := range r.pyDirs {
		if tooBroad(d) {
			return fmt.Errorf("%s: its installation %s is too broad a directory to show the program", r.python, d)
		}
	}
	key := fmt.Sprintf("%v\x00%s", r.cred != nil, strings.Join(r.command(), "\x00"))
	if v, ok := probes.Load(key); ok {
		err, _ := v.(error)
		return err
	}
	timeout := max(r.opts.Timeout, 30*time.Second)
	res, err := r.run(ctx, "import sys\nprint('sandbox ok', sys.version_info[0])", timeout)
	switch {
	case err != nil && ctx.Err() != nil:
		return err
	case err != nil:
	case res.Status != StatusOK || strings.TrimSpace(res.Stdout) != "sandbox ok 3":
		err = fmt.Errorf("status %s, exit %d: %s", res.Status, res.ExitCode, lastLine(res.Stderr))
	}
	if err != nil {
		err = fmt.Errorf("%s under bwrap: %w", r.python, err)
		if r.cred != nil {
			err = fmt.Errorf("%w (whale is root, so bwrap runs as uid %d: the interpreter must be readable by every user)", err, sandboxID)
		}
	}
	if err == nil && !kernelAtLeast(5, 14) {
		r.opts.Log.Warn("local python: this kernel counts RLIMIT_NPROC per user, not per sandbox (before Linux 5.14): "+
			"runs at once share MaxProcesses, so a program that forks may fail depending on how many run", "max_processes", r.opts.MaxProcesses)
	}
	probes.Store(key, err)
	return err
}

// kernelAtLeast reports whether the running Linux kernel's release is at
// least major.minor; false where it cannot tell.
func kernelAtLeast(major, minor int) bool {
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return false
	}
	var b strings.Builder
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	var ma, mi int
	if _, err := fmt.Sscanf(b.String(), "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || (ma == major && mi >= minor)
}

// Python is the interpreter the runner uses.
func (r *LocalPython) Python() string { return r.python }

// Isolated reports whether programs run without network access.
func (r *LocalPython) Isolated() bool { return !r.opts.AllowNetwork }

// command is the whole sandbox command line that runs /tmp/main.py, whose
// text bwrap reads from fd 3. Why each option:
//
//	--unshare-all --unshare-user   own user, mount, PID, network, IPC, UTS
//	                               (and cgroup) namespaces; --share-net
//	                               only with AllowNetwork
//	--disable-userns               no nested user namespaces (kernel attack
//	                               surface)
//	--uid/--gid 65534              the program is nobody, without capabilities
//	--die-with-parent              bwrap and everything in it die with whale
//	--new-session                  no TIOCSTI into a terminal of ours
//	--hostname                     the host's name stays hidden
//	--clearenv --setenv            nothing of the parent's environment
//	--ro-bind /usr, /lib* links    the interpreter, its libraries and
//	--ro-bind-try /etc/ld.so.*     modules, read-only; /etc/alternatives for
//	                               Debian's BLAS links; the interpreter's own
//	                               prefix where it is outside /usr
//	--proc /proc                   a proc of the new PID namespace only
//	--dev /dev, --remount-ro /dev  the null/zero/random devices, read-only
//	--size --tmpfs /dev/shm, /tmp  private, size-limited writable space
//	--file 3 /tmp/main.py          the program, copied in; no host directory
//	                               is shared
//	--remount-ro /                 the sandbox's root tmpfs is not writable
//	python -S -E -c preamble ...   closes inherited descriptors and sets the
//	                               rlimits in the sandbox, then execs the
//	                               program: bwrap itself runs unlimited, hard
//	                               limits equal soft ones so the program
//	                               cannot raise them, and every descendant
//	                               inherits them
func (r *LocalPython) command() []string {
	disk := int64(r.opts.DiskLimitMB) << 20
	a := []string{r.bwrap, "--unshare-all", "--unshare-user", "--disable-userns"}
	if r.opts.AllowNetwork {
		a = append(a, "--share-net")
	}
	id := strconv.Itoa(sandboxID)
	a = append(a, "--uid", id, "--gid", id, "--die-with-parent", "--new-session",
		"--hostname", "sandbox", "--clearenv")
	for _, kv := range r.env() {
		k, v, _ := strings.Cut(kv, "=")
		a = append(a, "--setenv", k, v)
	}
	a = append(a, "--ro-bind", "/usr", "/usr")
	for _, d := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		p := "/" + d
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(p); err == nil {
				a = append(a, "--symlink", target, p)
			}
		case fi.IsDir():
			a = append(a, "--ro-bind", p, p)
		}
	}
	for _, p := range []string{"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives"} {
		a = append(a, "--ro-bind-try", p, p)
	}
	a = append(a, "--proc", "/proc", "--dev", "/dev",
		"--size", strconv.FormatInt(min(shmBytes, disk), 10), "--perms", "1777", "--tmpfs", "/dev/shm",
		"--remount-ro", "/dev",
		"--size", strconv.FormatInt(disk, 10), "--perms", "1777", "--tmpfs", workDir)
	// After /tmp, so an interpreter installed under /tmp stays visible.
	for _, d := range r.pyDirs {
		a = append(a, "--ro-bind", d, d)
	}
	mem := int64(-1)
	if r.opts.MemoryLimitMB > 0 {
		mem = int64(r.opts.MemoryLimitMB) << 20
	}
	cpu := int64(math.Ceil(r.opts.Timeout.Seconds())) + 1
	a = append(a, "--file", "3", workDir+"/main.py", "--chdir", workDir, "--remount-ro", "/", "--",
		r.python, "-S", "-E", "-c", preamble)
	for _, n := range []int64{mem, cpu, int64(r.opts.MaxProcesses), int64(r.opts.MaxOpenFiles), disk} {
		a = append(a, strconv.FormatInt(n, 10))
	}
	return a
}

// preamble runs first in the sandbox: it closes every descriptor but the
// standard three (bwrap passes on whatever whale inherited), sets the
// limits, and replaces itself with the program, so the program's
// tracebacks show only its own frames. -S -E: no site packages, no
// PYTHON* variables, a fast start; the program itself starts normally.
// Arguments: address space (negative: none), CPU seconds, processes, open
// files, file size.
const preamble = `import os, resource, sys
mem, cpu, nproc, nofile, fsize = map(int, sys.argv[1:6])
os.closerange(3, 1 << 20)
def limit(what, soft, hard=None):
    resource.setrlimit(what, (soft, soft if hard is None else hard))
if mem > 0:
    limit(resource.RLIMIT_AS, mem)
limit(resource.RLIMIT_CPU, cpu, cpu + 1)
limit(resource.RLIMIT_NPROC, nproc)
limit(resource.RLIMIT_NOFILE, nofile)
limit(resource.RLIMIT_FSIZE, fsize)
limit(resource.RLIMIT_CORE, 0)
os.execv(sys.executable, [sys.executable, "main.py"])
`

// Run runs code as /tmp/main.py in a fresh sandbox. See CodeRunner.
func (r *LocalPython) Run(ctx context.Context, code string) (RunResult, error) {
	return r.run(ctx, code, r.opts.Timeout)
}

func (r *LocalPython) run(ctx context.Context, code string, timeout time.Duration) (RunResult, error) {
	if err := ctx.Err(); err != nil {
		return RunResult{}, fmt.Errorf("local python: %w", err)
	}
	src, err := stage(r.opts.TempDir, code)
	if err != nil {
		return RunResult{}, err
	}
	defer src.Close()

	args := r.command()
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(runCtx, args[0], args[1:]...)
	cmd.Dir = "/"
	cmd.Env = []string{} // bwrap itself needs nothing of ours either
	cmd.ExtraFiles = []*os.File{src}
	stdout := &capWriter{max: r.opts.MaxOutputBytes}
	stderr := &capWriter{max: r.opts.MaxOutputBytes}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	// Own process group, so the kill reaches bwrap whatever it started
	// outside the sandbox; bwrap dies with us if whale is killed, and the
	// sandbox with bwrap (--die-with-parent, and the PID namespace ends
	// with its init).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: r.cred}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A child holding the output pipes open must not hold up Wait.
	cmd.WaitDelay = time.Second

	start := time.Now()
	if err := cmd.Start(); err != nil {
		r.opts.Log.Warn("local python: start failed", "bwrap", args[0], "err", err)
		return RunResult{}, fmt.Errorf("local python: start %s: %w", args[0], err)
	}
	waitErr := cmd.Wait()
	elapsed := time.Since(start)
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

// stage writes the program to an unlinked temporary file and rewinds it:
// bwrap copies it into the sandbox from the open descriptor.
func stage(dir, code string) (*os.File, error) {
	f, err := os.CreateTemp(dir, "whale-py-*.py")
	if err != nil {
		return nil, fmt.Errorf("local python: stage the program: %w", err)
	}
	_ = os.Remove(f.Name())
	if _, err := f.WriteString(code); err != nil {
		f.Close()
		return nil, fmt.Errorf("local python: stage the program: %w", err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("local python: stage the program: %w", err)
	}
	return f, nil
}

// env is the program's whole environment: enough for Python to start and
// to behave the same on every machine, and nothing of the parent's.
func (r *LocalPython) env() []string {
	env := []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + workDir,
		"TMPDIR=" + workDir,
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

// exitCode is the exit code, or -N for a process killed by signal N. bwrap
// reports a sandboxed program killed by signal N as exit code 128+N, which
// is read as the signal (a program that exits with 129..192 itself is
// reported as killed, the shell's ambiguity).
func exitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -int(ws.Signal())
	}
	code := ps.ExitCode()
	if code > 128 && code <= 128+64 {
		return -(code - 128)
	}
	return code
}

// classifyExit names how a program that did not succeed ended.
func classifyExit(code int, stderr string) string {
	switch {
	case code == 0:
		return StatusOK
	case code == -int(syscall.SIGXCPU):
		return StatusTimeout // past its CPU-time limit
	case isOOM(code, stderr):
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

package mathdomain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// newLocal builds a runner, or skips when this machine has no python3 or
// cannot sandbox it (no bubblewrap, no namespaces); under CI=true a missing
// sandbox fails instead, as CI installs bubblewrap (make tools).
func newLocal(t *testing.T, mod func(*LocalPythonOptions)) *LocalPython {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed; the local runner cannot be tested here")
	}
	opts := LocalPythonOptions{Timeout: 10 * time.Second, Log: quiet}
	if mod != nil {
		mod(&opts)
	}
	r, err := NewLocalPython(context.Background(), opts)
	if err != nil {
		if errors.Is(err, ErrNoSandbox) {
			msg := fmt.Sprintf("this machine cannot sandbox python: %v", err)
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		t.Fatal(err)
	}
	return r
}

func TestLocalPythonOutcomes(t *testing.T) {
	t.Parallel()
	r := newLocal(t, nil)
	cases := []struct {
		name, code     string
		status         string
		exit           int
		stdout, stderr []string // substrings
	}{
		{"prints", "print('hello')\nprint(2**100)", StatusOK, 0, []string{"hello\n1267650600228229401496703205376\n"}, nil},
		{"stderr", "import sys\nsys.stderr.write('warn\\n')\nprint('ok')", StatusOK, 0, []string{"ok"}, []string{"warn"}},
		{"exception", "print('before')\nraise ValueError('boom')", StatusError, 1, []string{"before"},
			[]string{"Traceback", `main.py", line 2`, "ValueError: boom"}},
		{"exit code", "import sys\nsys.exit(3)", StatusError, 3, nil, nil},
		{"syntax error", "print(", StatusError, 1, nil, []string{"SyntaxError"}},
		{"unicode", "print('π ≈', 22/7)", StatusOK, 0, []string{"π ≈ 3.142857142857143"}, nil},
		{"sympy-free math", "from fractions import Fraction\nprint(sum(Fraction(1, k) for k in range(1, 11)))", StatusOK, 0, []string{"7381/2520"}, nil},
		{"killed by signal", "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)", StatusError, -int(syscall.SIGTERM), nil, nil},
		{"no stdin", "import sys\nprint(repr(sys.stdin.read()))", StatusOK, 0, []string{"''"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := r.Run(context.Background(), c.code)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != c.status || res.ExitCode != c.exit {
				t.Fatalf("status %q exit %d, want %q %d; result %+v", res.Status, res.ExitCode, c.status, c.exit, res)
			}
			for _, s := range c.stdout {
				if !strings.Contains(res.Stdout, s) {
					t.Errorf("stdout %q lacks %q", res.Stdout, s)
				}
			}
			for _, s := range c.stderr {
				if !strings.Contains(res.Stderr, s) {
					t.Errorf("stderr %q lacks %q", res.Stderr, s)
				}
			}
			if res.Duration <= 0 || res.Truncated {
				t.Errorf("duration %v truncated %v", res.Duration, res.Truncated)
			}
		})
	}
}

func TestLocalPythonTimeoutKillsAll(t *testing.T) {
	t.Parallel()
	r := newLocal(t, func(o *LocalPythonOptions) { o.Timeout = 3 * time.Second })
	// The program starts a child, says so, and spins; the kill must take
	// both.
	marker := newMarker(t)
	code := marked(marker, `import subprocess
p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", sys.argv[1]])
print("child", p.pid, flush=True)
while True:
    pass
`)
	start := time.Now()
	res, err := r.Run(context.Background(), code)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != StatusTimeout || !strings.HasPrefix(res.Stdout, "child ") {
		t.Fatalf("status %q, want timeout after the child started; %+v", res.Status, res)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("timeout took %v", took)
	}
	assertNoneLeft(t, marker)
}

// newMarker is a string no other process on the machine has in its
// command line.
func newMarker(t *testing.T) string {
	return fmt.Sprintf("whale-sandbox-test-%d-%d", os.Getpid(), time.Now().UnixNano())
}

// marked prefixes code with a re-exec that puts marker on the program's
// command line (sys.argv[1]), which every process it forks inherits, so
// the test can look for them in the host's /proc.
func marked(marker, code string) string {
	return fmt.Sprintf("import os, sys\nif sys.argv[1:] != [%q]:\n    os.execv(sys.executable, [sys.executable, \"main.py\", %q])\n", marker, marker) + code
}

// markedPids lists the live host processes with marker in their command
// line.
func markedPids(marker string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.Contains(string(cmdline), marker) && processAlive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// assertNoneLeft fails when a process of the run is still there once the
// run returned (allowing the kernel a moment to finish the kill).
func assertNoneLeft(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		pids := markedPids(marker)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of the run outlived it: %v", pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestLocalPythonMemoryLimit(t *testing.T) {
	t.Parallel()
	r := newLocal(t, func(o *LocalPythonOptions) { o.MemoryLimitMB = 64 })
	for name, code := range map[string]string{
		"one big block": "x = bytes(1 << 30)\nprint(len(x))",
		"growing list":  "a = []\nwhile True:\n    a.append(' ' * 10**6)",
	} {
		t.Run(name, func(t *testing.T) {
			res, err := r.Run(context.Background(), code)
			if err != nil {
				t.Fatal(err)
			}
			if res.Status != StatusOOM {
				t.Fatalf("status %q, want oom; %+v", res.Status, res)
			}
		})
	}
	// The same block fits without the limit, so the limit is what stopped it.
	free := newLocal(t, func(o *LocalPythonOptions) { o.MemoryLimitMB = -1 })
	res, err := free.Run(context.Background(), "x = bytes(1 << 30)\nprint(len(x))")
	if err != nil || res.Status != StatusOK {
		t.Fatalf("unlimited run: %+v, %v", res, err)
	}
}

func TestLocalPythonNoNetwork(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	code := fmt.Sprintf(`import socket
s = socket.create_connection(("127.0.0.1", %d), timeout=3)
print("connected")
`, port)

	isolated := newLocal(t, nil)
	if !isolated.Isolated() {
		t.Fatal("runner without AllowNetwork is not isolated")
	}
	res, err := isolated.Run(context.Background(), code)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != StatusError || strings.Contains(res.Stdout, "connected") || !strings.Contains(res.Stderr, "Error") {
		t.Errorf("isolated run reached the listener: %+v", res)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("listener accepted %d connections from the isolated run", n)
	}

	// The same program does connect when the network is allowed, so the
	// failure above is the namespace's doing.
	open := newLocal(t, func(o *LocalPythonOptions) { o.AllowNetwork = true })
	res, err = open.Run(context.Background(), code)
	if err != nil || res.Status != StatusOK || !strings.Contains(res.Stdout, "connected") {
		t.Fatalf("AllowNetwork run: %+v, %v", res, err)
	}
}

func TestLocalPythonEnvironment(t *testing.T) {
	t.Setenv("AWS_SECRET_ACCESS_KEY", "do-not-leak-4711")
	t.Setenv("WHALE_TEST_TOKEN", "do-not-leak-4712")
	r := newLocal(t, func(o *LocalPythonOptions) { o.Env = []string{"EXTRA=1"} })
	res, err := r.Run(context.Background(), "import os, json\nprint(json.dumps(dict(os.environ)))")
	if err != nil || res.Status != StatusOK {
		t.Fatalf("%+v, %v", res, err)
	}
	var env map[string]string
	if err := json.Unmarshal([]byte(res.Stdout), &env); err != nil {
		t.Fatalf("stdout %q: %v", res.Stdout, err)
	}
	if _, ok := env["AWS_SECRET_ACCESS_KEY"]; ok {
		t.Error("AWS_SECRET_ACCESS_KEY reached the program")
	}
	if strings.Contains(res.Stdout, "do-not-leak") {
		t.Errorf("a parent variable leaked: %s", res.Stdout)
	}
	if env["EXTRA"] != "1" || env["HOME"] == "" {
		t.Errorf("environment %v lacks EXTRA or HOME", env)
	}
	if _, err := NewLocalPython(context.Background(), LocalPythonOptions{Env: []string{"NOEQUALS"}}); err == nil {
		t.Error("malformed Env entry accepted")
	}
}

func TestLocalPythonWorkDir(t *testing.T) {
	t.Parallel()
	parent := t.TempDir()
	r := newLocal(t, func(o *LocalPythonOptions) { o.TempDir = parent })
	// Each run starts in an empty private /tmp: what one run wrote is gone
	// in the next.
	code := "import os\nprint(os.path.exists('scratch.txt'))\nopen('scratch.txt', 'w').write('x')\nprint(os.getcwd())\nprint(sorted(os.listdir('.')))"
	for range 2 {
		res, err := r.Run(context.Background(), code)
		if err != nil || res.Status != StatusOK {
			t.Fatalf("%+v, %v", res, err)
		}
		if res.Stdout != "False\n/tmp\n['main.py', 'scratch.txt']\n" {
			t.Fatalf("stdout %q", res.Stdout)
		}
	}
	if ents, err := os.ReadDir(parent); err != nil || len(ents) != 0 {
		t.Errorf("TempDir keeps %v (%v); want the staged programs removed", ents, err)
	}
}

func TestLocalPythonTruncates(t *testing.T) {
	t.Parallel()
	r := newLocal(t, func(o *LocalPythonOptions) { o.MaxOutputBytes = 1001 })
	res, err := r.Run(context.Background(), "print('é' * 100000)\nimport sys\nsys.stderr.write('tail')")
	if err != nil || res.Status != StatusOK {
		t.Fatalf("%+v, %v", res, err)
	}
	if len(res.Stdout) != 1000 || !res.Truncated || res.Stderr != "tail" {
		t.Errorf("stdout %d bytes, truncated %v, stderr %q", len(res.Stdout), res.Truncated, res.Stderr)
	}
}

func TestLocalPythonCancel(t *testing.T) {
	t.Parallel()
	r := newLocal(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	_, err := r.Run(ctx, "import time\ntime.sleep(60)")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("cancel took %v", took)
	}
}

func TestLocalPythonConcurrent(t *testing.T) {
	t.Parallel()
	r := newLocal(t, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		wg.Go(func() {
			res, err := r.Run(context.Background(), fmt.Sprintf("print(%d * 7)", i))
			if err == nil && strings.TrimSpace(res.Stdout) != strconv.Itoa(i*7) {
				err = fmt.Errorf("run %d: stdout %q", i, res.Stdout)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestNewLocalPythonMissingInterpreter(t *testing.T) {
	_, err := NewLocalPython(context.Background(), LocalPythonOptions{Python: "no-such-python-4711"})
	if err == nil || !strings.Contains(err.Error(), "no-such-python-4711") {
		t.Fatalf("err = %v", err)
	}
}

func TestNoSandboxIsAnError(t *testing.T) {
	// Without bwrap on PATH the runner must refuse, not silently run
	// weaker; AllowNetwork is no way around it.
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed; the local runner cannot be tested here")
	}
	python, _, err := resolvePython(context.Background(), "python3")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", t.TempDir())
	for _, allow := range []bool{false, true} {
		_, err = NewLocalPython(context.Background(), LocalPythonOptions{Python: python, AllowNetwork: allow, Log: quiet})
		if !errors.Is(err, ErrNoSandbox) || !strings.Contains(err.Error(), "bwrap") || !strings.Contains(err.Error(), "SandboxFusion") {
			t.Fatalf("AllowNetwork %v: err = %v, want a clear no-sandbox error", allow, err)
		}
	}
}

func TestBrokenBwrapIsAnError(t *testing.T) {
	// A bwrap that cannot make its namespaces (here: a stand-in that
	// says so) is found at the probe, and the runner refuses.
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed; the local runner cannot be tested here")
	}
	python, _, err := resolvePython(context.Background(), "python3")
	if err != nil {
		t.Fatal(err)
	}
	// Readable by the sandbox user, as whale starts bwrap as nobody when
	// it is root.
	bin := t.TempDir()
	for _, d := range []string{bin, filepath.Dir(bin)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fake := "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n"
	if err := os.WriteFile(bin+"/bwrap", []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	_, err = NewLocalPython(context.Background(), LocalPythonOptions{Python: python, Log: quiet})
	if !errors.Is(err, ErrNoSandbox) || !strings.Contains(err.Error(), "No permissions to create new namespace") ||
		!strings.Contains(err.Error(), "tools.sandbox") {
		t.Fatalf("err = %v, want the probe's failure and the way out", err)
	}
}

func TestPythonDirs(t *testing.T) {
	got := pythonDirs([]string{"/usr", "/usr/local/bin", "/opt/py", "/opt/py/bin", "/opt/py-venv", "/opt/py-venv/bin", "", "rel", "/opt/py"})
	if want := []string{"/opt/py", "/opt/py-venv"}; !slices.Equal(got, want) {
		t.Errorf("pythonDirs = %q, want %q", got, want)
	}
	for _, d := range []string{"/", "/home", "/tmp"} {
		if !tooBroad(d) {
			t.Errorf("tooBroad(%q) = false", d)
		}
	}
	if tooBroad("/opt/py") {
		t.Error("tooBroad(/opt/py) = true")
	}
}

package mathdomain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// newLocal builds a runner, or skips when this machine has no python3 (the
// runner's tests need a real interpreter; CI images have one).
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
		if strings.Contains(err.Error(), "no network isolation") {
			t.Skipf("this machine cannot make network namespaces (not root, no user namespaces): %v", err)
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

func TestLocalPythonTimeoutKillsGroup(t *testing.T) {
	t.Parallel()
	r := newLocal(t, func(o *LocalPythonOptions) { o.Timeout = 4 * time.Second })
	// The program starts a child in its process group, says its pid, and
	// spins; the kill must take both.
	code := `import subprocess, sys
p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(p.pid, flush=True)
while True:
    pass
`
	start := time.Now()
	res, err := r.Run(context.Background(), code)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != StatusTimeout {
		t.Fatalf("status %q, want timeout; %+v", res.Status, res)
	}
	if took := time.Since(start); took > 15*time.Second {
		t.Errorf("timeout took %v", took)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(res.Stdout))
	if err != nil {
		t.Fatalf("stdout %q: %v", res.Stdout, err)
	}
	// The kill is asynchronous; give the kernel a moment to reap.
	deadline := time.Now().Add(3 * time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("child %d still alive after the timeout", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processAlive reports a live (not zombie) process.
func processAlive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
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
	code := "import os\nopen('scratch.txt', 'w').write('x')\nprint(os.getcwd())\nprint(sorted(os.listdir('.')))"
	var dirs []string
	for range 2 {
		res, err := r.Run(context.Background(), code)
		if err != nil || res.Status != StatusOK {
			t.Fatalf("%+v, %v", res, err)
		}
		lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
		if len(lines) != 2 || lines[1] != "['main.py', 'scratch.txt']" {
			t.Fatalf("stdout %q", res.Stdout)
		}
		dirs = append(dirs, lines[0])
		if _, err := os.Stat(lines[0]); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("work dir %s not removed: %v", lines[0], err)
		}
	}
	if dirs[0] == dirs[1] || !strings.HasPrefix(dirs[0], parent) {
		t.Errorf("work dirs %v, want two fresh ones under %s", dirs, parent)
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

func TestNoNetworkIsolationIsAnError(t *testing.T) {
	// Without unshare on PATH the runner must refuse, not silently run
	// with the network.
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed; the local runner cannot be tested here")
	}
	python, err := resolvePython(context.Background(), "python3")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", t.TempDir())
	_, err = NewLocalPython(context.Background(), LocalPythonOptions{Python: python})
	if err == nil || !strings.Contains(err.Error(), "no network isolation") || !strings.Contains(err.Error(), "AllowNetwork") {
		t.Fatalf("err = %v, want a clear no-isolation error", err)
	}
	r, err := NewLocalPython(context.Background(), LocalPythonOptions{Python: python, AllowNetwork: true})
	if err != nil || r.Isolated() {
		t.Fatalf("AllowNetwork: %v, isolated %v", err, r != nil && r.Isolated())
	}
}

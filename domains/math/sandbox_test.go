package mathdomain

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The attacks a model-written program might try on the local runner, one
// test each: every one must be blocked, or bounded and killed, with an
// observation that says so.

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

// A normal program still works: imports, prints, a temporary file written
// and read back.
func TestSandboxNormalProgram(t *testing.T) {
	t.Parallel()
	r := newLocal(t, nil)
	code := `import math, os, tempfile, fractions
print(math.comb(10, 3), math.isqrt(10**12 + 7), fractions.Fraction(3, 12))
with tempfile.NamedTemporaryFile("w+", delete=False) as f:
    f.write("42\n")
    name = f.name
print(open(name).read().strip(), name.startswith(tempfile.gettempdir()), os.getcwd())
`
	res, err := r.Run(context.Background(), code)
	if err != nil || res.Status != StatusOK || res.Stdout != "120 1000000 1/4\n42 True /tmp\n" || res.Stderr != "" {
		t.Fatalf("%+v, %v", res, err)
	}
}

// What the program sees: nobody without capabilities, alone in its PID
// namespace, a root of a few read-only directories, no nested user
// namespaces, no descriptor whale inherited.
func TestSandboxView(t *testing.T) {
	t.Parallel()
	r := newLocal(t, nil)
	// A descriptor without close-on-exec, as whale may inherit one from
	// whatever started it.
	secret := filepath.Join(t.TempDir(), "inherited")
	if err := os.WriteFile(secret, []byte("inherited-4711"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(secret)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, _, errno := syscall.Syscall(syscall.SYS_FCNTL, f.Fd(), syscall.F_SETFD, 0); errno != 0 {
		t.Fatal(errno)
	}
	code := `import os, socket, subprocess
print(sorted(os.listdir("/proc/self/fd")))
print(os.getuid(), os.getgid(), os.getgroups())
print([l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0])
print(sorted(p for p in os.listdir("/proc") if p.isdigit()))
print(socket.gethostname())
print(sorted(os.listdir("/")))
print(subprocess.run(["unshare", "--user", "true"], capture_output=True).returncode != 0)
`
	res, err := r.Run(context.Background(), code)
	if err != nil || res.Status != StatusOK {
		t.Fatalf("%+v, %v", res, err)
	}
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if len(lines) != 7 {
		t.Fatalf("stdout %q", res.Stdout)
	}
	// 3 is listdir's own.
	if lines[0] != "['0', '1', '2', '3']" {
		t.Errorf("open descriptors %s, want the standard three", lines[0])
	}
	lines = lines[1:]
	if lines[0] != "65534 65534 []" || lines[1] != "0000000000000000" || lines[3] != "sandbox" || lines[5] != "True" {
		t.Errorf("identity %q, capabilities %q, hostname %q, nested userns refused %q", lines[0], lines[1], lines[3], lines[5])
	}
	// bwrap's init (1) and the program (2): no process of the host.
	if lines[2] != "['1', '2']" {
		t.Errorf("visible processes %s", lines[2])
	}
	for _, forbidden := range []string{"'home'", "'root'", "'work'", "'var'", "'opt'", "'sys'", "'run'", "'mnt'"} {
		if strings.Contains(lines[4], forbidden) {
			t.Errorf("the sandbox root %s shows %s", lines[4], forbidden)
		}
	}
}

// (a) The secret in the parent's environment: not in os.environ, and no
// /proc/<pid>/environ of the host (whale's, or another process's started
// with the secret) can be read.
func TestSandboxParentEnviron(t *testing.T) {
	const secret = "fake-secret-AKIA-4711-do-not-leak"
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	r := newLocal(t, nil)
	// A host process that has the secret in its initial environment, as
	// whale has when started with credentials.
	decoy := exec.Command("sleep", "60")
	decoy.Env = []string{"AWS_SECRET_ACCESS_KEY=" + secret}
	if err := decoy.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = decoy.Process.Kill(); _ = decoy.Wait() }()
	// The attack works on the host, so the sandbox is what stops it. Until
	// the decoy has exec'd, its environ is the forking parent's (or empty on
	// a loaded machine), so wait for the exec rather than read once.
	var env []byte
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		env, err = os.ReadFile(fmt.Sprintf("/proc/%d/environ", decoy.Process.Pid))
		if (err == nil && strings.Contains(string(env), secret)) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil || !strings.Contains(string(env), secret) {
		t.Fatalf("the decoy's environ %q (%v) lacks the secret", env, err)
	}
	code := fmt.Sprintf(`import glob, os
paths = ["/proc/%%d/environ" %% os.getppid(), "/proc/1/environ", "/proc/self/environ",
         "/proc/%d/environ", "/proc/%d/environ"] + glob.glob("/proc/*/environ")
for p in paths:
    try:
        print(p, open(p, "rb").read().replace(b"\0", b" ").decode(errors="replace"))
    except OSError as e:
        print(p, "blocked:", e)
print(dict(os.environ))
`, decoy.Process.Pid, os.Getpid())
	res, err := r.Run(context.Background(), code)
	if err != nil || res.Status != StatusOK {
		t.Fatalf("%+v, %v", res, err)
	}
	if strings.Contains(res.Stdout+res.Stderr, secret) || strings.Contains(res.Stdout, "AWS_SECRET") {
		t.Fatalf("the secret leaked into the observation:\n%s", res.Stdout)
	}
	for _, pid := range []int{decoy.Process.Pid, os.Getpid()} {
		if p := fmt.Sprintf("/proc/%d/environ", pid); !strings.Contains(res.Stdout, p+" blocked:") {
			t.Errorf("host %s was not blocked:\n%s", p, res.Stdout)
		}
	}
}

// (b) Writes outside the private /tmp: the home directory, the host's
// /tmp, the repository, a test directory. None reaches the host, and a
// host file is not readable either.
func TestSandboxWritesStayInside(t *testing.T) {
	t.Parallel()
	r := newLocal(t, nil)
	name := fmt.Sprintf("whale-escape-%d-%d", os.Getpid(), time.Now().UnixNano())
	hostDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(hostDir, "host-secret.txt"), []byte("host-file-content-4711"), 0o644); err != nil {
		t.Fatal(err)
	}
	home, _ := os.UserHomeDir()
	repo, _ := os.Getwd()
	targets := []string{filepath.Join(hostDir, name), filepath.Join("/tmp", name), filepath.Join(repo, name), "/" + name, "/usr/" + name, "/etc/" + name}
	if os.Geteuid() == 0 {
		targets = append(targets, "/root/"+name)
	}
	if home != "" {
		targets = append(targets, filepath.Join(home, name))
	}
	var list strings.Builder
	for _, p := range targets {
		fmt.Fprintf(&list, "%q, ", p)
	}
	code := fmt.Sprintf(`import os
for p in [%s]:
    try:
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write("escaped")
        print(p, "written (inside the sandbox)")
    except OSError as e:
        print(p, "blocked:", e)
try:
    print(open(%q).read())
except OSError as e:
    print("host file blocked:", e)
`, list.String(), filepath.Join(hostDir, "host-secret.txt"))
	res, err := r.Run(context.Background(), code)
	if err != nil || res.Status != StatusOK {
		t.Fatalf("%+v, %v", res, err)
	}
	for _, p := range targets {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			os.Remove(p)
			t.Errorf("%s exists on the host after the run (%v):\n%s", p, err, res.Stdout)
		}
	}
	if strings.Contains(res.Stdout, "host-file-content") || !strings.Contains(res.Stdout, "host file blocked:") {
		t.Errorf("the program read a host file:\n%s", res.Stdout)
	}
	for _, p := range []string{"/" + name, "/usr/" + name, "/etc/" + name} {
		if !strings.Contains(res.Stdout, p+" blocked:") {
			t.Errorf("write to %s not blocked:\n%s", p, res.Stdout)
		}
	}
}

// (c) A grandchild that leaves the session (setsid) and keeps running:
// it is gone when the run returns, and the run does not wait for it.
func TestSandboxNoGrandchildSurvives(t *testing.T) {
	t.Parallel()
	r := newLocal(t, nil)
	marker := newMarker(t)
	hostFile := filepath.Join(t.TempDir(), "grandchild-was-here")
	code := marked(marker, fmt.Sprintf(`import time
r, w = os.pipe()
os.set_inheritable(w, True)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        # The grandchild keeps stdout open and writes forever.
        os.execv(sys.executable, [sys.executable, "-c", """
import os, sys, time
os.write(int(sys.argv[1]), b"x")
while True:
    for p in [%q, "/tmp/alive"]:
        try:
            open(p, "a").write("x")
        except OSError:
            pass
    time.sleep(0.05)
""", str(w), sys.argv[1]])
    os._exit(0)
os.read(r, 1)
print("grandchild running", flush=True)
`, hostFile))
	start := time.Now()
	res, err := r.Run(context.Background(), code)
	if err != nil || res.Status != StatusOK || res.Stdout != "grandchild running\n" {
		t.Fatalf("%+v, %v", res, err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("the run took %v: it waited for the grandchild", took)
	}
	assertNoneLeft(t, marker)
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Stat(hostFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the grandchild wrote %s on the host (%v)", hostFile, err)
	}
}

// (d) A fork bomb: the process count stays under the limit, the run ends
// at its timeout, and nothing of it remains.
func TestSandboxForkBomb(t *testing.T) {
	t.Parallel()
	const limit = 16
	r := newLocal(t, func(o *LocalPythonOptions) { o.Timeout = 3 * time.Second; o.MaxProcesses = limit })
	marker := newMarker(t)
	code := marked(marker, `import time
print("bomb", flush=True)
failed = 0
while True:
    try:
        if os.fork() == 0:
            time.sleep(0.01)
    except OSError:
        failed += 1
        if failed == 1:
            print("fork refused", flush=True)
`)
	var peak int
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			peak = max(peak, len(markedPids(marker)))
		}
	})
	start := time.Now()
	res, err := r.Run(context.Background(), code)
	close(done)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != StatusTimeout || !strings.Contains(res.Stdout, "fork refused") {
		t.Errorf("status %q, stdout %q; want a timeout after refused forks", res.Status, res.Stdout)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the run took %v", took)
	}
	// The limit counts bwrap's init too.
	if peak == 0 || peak > limit {
		t.Errorf("peak of %d processes, want 1..%d", peak, limit)
	}
	t.Logf("fork bomb: peak %d processes, %v", peak, time.Since(start).Round(time.Millisecond))
	assertNoneLeft(t, marker)
}

// (e) Filling the disk: one big file stops at the file-size limit, many
// files at the size of the private /tmp, /dev/shm likewise; the errors
// are in the observation.
func TestSandboxDiskFill(t *testing.T) {
	t.Parallel()
	r := newLocal(t, func(o *LocalPythonOptions) { o.DiskLimitMB = 8 })
	code := `import errno, os
def fill(path, files):
    n = 0
    try:
        for i in range(1000):
            with open(path + (str(i) if files else ""), "ab") as f:
                for _ in range(1 if files else 1000):
                    f.write(b"\0" * (1 << 20))
                    f.flush()
                    n += 1
    except OSError as e:
        print(path, "stopped after", n, "MiB:", errno.errorcode[e.errno])
        return
    print(path, "not stopped after", n, "MiB")
fill("/tmp/big", False)
os.remove("/tmp/big")
fill("/tmp/many", True)
fill("/dev/shm/many", True)
`
	res, err := r.Run(context.Background(), code)
	if err != nil || res.Status != StatusOK {
		t.Fatalf("%+v, %v", res, err)
	}
	lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("stdout %q", res.Stdout)
	}
	for i, want := range []string{"/tmp/big stopped after ", "/tmp/many stopped after ", "/dev/shm/many stopped after "} {
		if !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %q, want %q...", lines[i], want)
			continue
		}
		mib, _ := strconv.Atoi(strings.Fields(strings.TrimPrefix(lines[i], want))[0])
		if mib > 8 || !(strings.HasSuffix(lines[i], "EFBIG") || strings.HasSuffix(lines[i], "ENOSPC")) {
			t.Errorf("%q: want at most 8 MiB and EFBIG or ENOSPC", lines[i])
		}
	}
}

// (g) A memory bomb spread over processes: each process is capped, so the
// total is bounded by processes × address space.
func TestSandboxMemoryBombProcesses(t *testing.T) {
	t.Parallel()
	r := newLocal(t, func(o *LocalPythonOptions) { o.MemoryLimitMB = 64; o.MaxProcesses = 8 })
	code := `import os
pids = []
for i in range(4):
    pid = os.fork()
    if pid == 0:
        try:
            a = []
            while True:
                a.append(bytearray(16 << 20))
        except MemoryError:
            os._exit(42)
        os._exit(0)
    pids.append(pid)
print(sorted(os.waitstatus_to_exitcode(os.waitpid(p, 0)[1]) for p in pids))
`
	res, err := r.Run(context.Background(), code)
	if err != nil || res.Status != StatusOK || res.Stdout != "[42, 42, 42, 42]\n" {
		t.Fatalf("%+v, %v", res, err)
	}
}

// An interpreter outside /usr (here a venv) runs with its own prefix bound
// read-only: its site-packages import, and it cannot be written.
func TestSandboxVenv(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 to make a venv from")
	}
	dir := t.TempDir()
	// Readable by the sandbox user (bwrap runs as nobody when whale is root).
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	venv := filepath.Join(dir, "venv")
	if out, err := exec.Command("/usr/bin/python3", "-m", "venv", "--without-pip", venv).CombinedOutput(); err != nil {
		t.Skipf("python3 -m venv: %v %s", err, out)
	}
	site, err := filepath.Glob(filepath.Join(venv, "lib", "python3*", "site-packages"))
	if err != nil || len(site) != 1 {
		t.Fatalf("site-packages: %v %v", site, err)
	}
	if err := os.WriteFile(filepath.Join(site[0], "whale_probe_mod.py"), []byte("ANSWER = 42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := newLocal(t, func(o *LocalPythonOptions) { o.Python = filepath.Join(venv, "bin", "python") })
	code := `import errno, sys, whale_probe_mod
print(whale_probe_mod.ANSWER, sys.prefix == sys.base_prefix)
try:
    open(whale_probe_mod.__file__, "a").write("x")
    print("written")
except OSError as e:
    print("refused:", e.errno in (errno.EROFS, errno.EACCES))
`
	res, err := r.Run(context.Background(), code)
	if err != nil || res.Status != StatusOK || res.Stdout != "42 False\nrefused: True\n" {
		t.Fatalf("%+v, %v", res, err)
	}
}

package propose

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/whalerun/whale/stages"
)

// requireSandbox skips the test where this machine cannot run the agent
// under bubblewrap; under CI=true that fails instead, as CI installs
// bubblewrap (make tools).
func requireSandbox(t *testing.T) *agentSandbox {
	t.Helper()
	sb, err := findSandbox(context.Background())
	if err != nil {
		msg := fmt.Sprintf("this machine cannot sandbox the agent: %v", err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return sb
}

// agentWorkDir is a folder for the agent's scratch folders that every
// user may search: when whale is root the agent runs as nobody, and
// t.TempDir's own parent is private (0700).
func agentWorkDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// outsideDir is a folder outside the system's temporary folder and the
// home (both hidden from the agent anyway), which every user may read,
// search and write: only the sandbox keeps the agent out of it.
func outsideDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "whale-propose-test-")
	if err != nil {
		t.Skipf("no folder outside /tmp to test with: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// The sandboxed agent does not see a file:// root's directory, a cache
// of Hide, whale's home or whale's process, writes nowhere but its
// scratch folder, still reaches a listener on loopback and still has its
// candidate harvested.
func TestAgentSandboxHides(t *testing.T) {
	requireSandbox(t)
	const (
		bucketSecret = "bucket-file-content-0123"
		cacheSecret  = "cache-file-content-4567"
		homeSecret   = "home-credentials-content-89ab"
	)
	bucket, cache, home, world := outsideDir(t), outsideDir(t), outsideDir(t), outsideDir(t)
	write(t, filepath.Join(bucket, "secret.txt"), bucketSecret)
	write(t, filepath.Join(cache, "index.txt"), cacheSecret)
	write(t, filepath.Join(home, ".aws", "credentials"), homeSecret)
	t.Setenv("HOME", home)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	heard := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		heard <- line
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	s := openStore(t, "file://"+bucket)
	tasks := commitTasks(t, s)
	before := listTree(t, bucket)
	st := &Stage{Domain: &fakeDomain{}, WorkDir: agentWorkDir(t), AgentTimeout: time.Minute, RootDir: StoreDir(s), Hide: []string{cache}}
	if st.RootDir != bucket {
		t.Fatalf("StoreDir %q, want %q", st.RootDir, bucket)
	}
	cfg := agentConfig(t, 2, "fake-agent-sandbox.sh", bucket, cache, home, world, strconv.Itoa(os.Getpid()), port)
	m, cands, rej := runStage(t, s, st, cfg, 1, tasks)
	log := readFile(t, s, m, "agent")
	if m.Summary["agent_sandbox"] != "bwrap" || !strings.HasPrefix(m.Summary["agent_status"].(string), "exited 0") ||
		!strings.Contains(log, "sandbox probe done") {
		t.Fatalf("summary %v, log:\n%s", m.Summary, log)
	}
	t.Logf("agent.log:\n%s", log)
	for _, leak := range []string{bucketSecret, cacheSecret, homeSecret, "WROTE", "MADE", "SHOWS", "READ"} {
		if strings.Contains(log, leak) {
			t.Errorf("the agent got %q", leak)
		}
	}
	if !strings.Contains(log, "bucket holds: \n") {
		t.Errorf("the bucket's directory is not empty to the agent:\n%s", log)
	}
	// Nothing the agent tried to write reached the host: the bucket gained
	// the stage's own commit only.
	after := listTree(t, bucket)
	added := slices.DeleteFunc(slices.Clone(after), func(p string) bool {
		return slices.Contains(before, p) || strings.HasPrefix(p, "runs/exp/stages/r001-h02-propose")
	})
	if !slices.Contains(after, "secret.txt") || len(added) != 0 {
		t.Errorf("the bucket changed: before %v, after %v", before, after)
	}
	if _, err := os.Stat(filepath.Join(world, "forged")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the agent wrote outside its scratch folder: %v", err)
	}
	// Its /tmp is a private one.
	if _, err := os.Stat(fmt.Sprintf("/tmp/agent-tmp-%d", os.Getpid())); !strings.Contains(log, "private tmp ok") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("/tmp: %v; log:\n%s", err, log)
	}
	if strings.Contains(log, "no bash") {
		t.Log("no bash here: the network was not tried")
	} else {
		select {
		case got := <-heard:
			if got != "hello-from-agent\n" || !strings.Contains(log, "network ok") {
				t.Errorf("loopback listener heard %q; log:\n%s", got, log)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("the agent did not reach the loopback listener; log:\n%s", log)
		}
	}
	if names(cands) != "sandboxed" || len(rej) != 0 {
		t.Fatalf("candidates %s, rejected %+v", names(cands), rej)
	}
	if left, _ := os.ReadDir(st.WorkDir); len(left) != 0 {
		t.Errorf("scratch folder left behind: %v", left)
	}
}

// listTree lists the paths under dir, relative, slash-separated.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel, _ := filepath.Rel(dir, p); rel != "." {
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A file:// root without bubblewrap: the agent does not run.
func TestAgentFileRootWithoutSandbox(t *testing.T) {
	t.Setenv("PATH", t.TempDir()) // no bwrap on it
	bucket := t.TempDir()
	s := openStore(t, "file://"+bucket)
	tasks := commitTasks(t, s)
	ran := filepath.Join(t.TempDir(), "ran")
	st := &Stage{Domain: &fakeDomain{}, WorkDir: agentWorkDir(t), RootDir: StoreDir(s)}
	cfg := agentConfig(t, 2, "fake-agent-silent.sh")
	cfg.AgentCommand = "/bin/touch " + ran + "; " + cfg.AgentCommand
	_, err := stages.Execute(context.Background(), s, stages.Spec{Run: "exp", Position: "r001-h02", Config: cfg, Seed: 1, Inputs: []stages.InputRef{tasks}, Log: quiet}, st)
	if !errors.Is(err, ErrNoAgentSandbox) {
		t.Fatalf("err %v, want ErrNoAgentSandbox", err)
	}
	t.Setenv(NoSandboxEnv, "1") // never for a file:// root
	_, err = stages.Execute(context.Background(), s, stages.Spec{Run: "exp", Position: "r001-h02", Config: cfg, Seed: 1, Inputs: []stages.InputRef{tasks}, Log: quiet}, st)
	if !errors.Is(err, ErrNoAgentSandbox) {
		t.Fatalf("with %s=1: err %v, want ErrNoAgentSandbox", NoSandboxEnv, err)
	}
	for _, want := range []string{bucket, "bubblewrap (bwrap) is not on PATH", "apt-get install bubblewrap"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal lacks %q: %v", want, err)
		}
	}
	if _, err := os.Stat(ran); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the agent ran: %v", err)
	}
	if left, _ := os.ReadDir(st.WorkDir); len(left) != 0 {
		t.Errorf("scratch folder made: %v", left)
	}
}

// Another root without bubblewrap: refused, unless NoSandboxEnv allows
// it; then the agent runs, with a warning.
func TestAgentObjectRootWithoutSandbox(t *testing.T) {
	bin := t.TempDir()
	for _, p := range []string{"sh", "cat"} {
		path, err := exec.LookPath(p)
		if err != nil {
			t.Skip(err)
		}
		if err := os.Symlink(path, filepath.Join(bin, p)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin)
	var logs bytes.Buffer
	s := openStore(t, "mem://")
	tasks := commitTasks(t, s)
	st := &Stage{Domain: &fakeDomain{}, WorkDir: agentWorkDir(t), Log: slog.New(slog.NewTextHandler(&logs, nil))}
	_, err := stages.Execute(context.Background(), s, stages.Spec{Run: "exp", Position: "r001-h01", Config: agentConfig(t, 2, "fake-agent-silent.sh"),
		Seed: 1, Inputs: []stages.InputRef{tasks}, Log: quiet}, st)
	if !errors.Is(err, ErrNoAgentSandbox) || !strings.Contains(err.Error(), NoSandboxEnv+"=1") || !strings.Contains(err.Error(), "~/.aws") {
		t.Fatalf("without %s: err %v, want a refusal saying what the agent could read and how to allow it", NoSandboxEnv, err)
	}
	t.Setenv(NoSandboxEnv, "1")
	m, cands, rej := runStage(t, s, st, agentConfig(t, 2, "fake-agent-silent.sh"), 1, tasks)
	if m.Summary["agent_sandbox"] != "none" || !strings.HasPrefix(m.Summary["agent_status"].(string), "exited 0") {
		t.Fatalf("summary %v", m.Summary)
	}
	if len(cands) != 0 || kinds(rej) != RejectAgentQuiet {
		t.Fatalf("candidates %s, rejected %+v", names(cands), rej)
	}
	if !strings.Contains(logs.String(), "the agent runs without a sandbox (") ||
		!strings.Contains(logs.String(), "not on PATH") {
		t.Errorf("no warning:\n%s", logs.String())
	}
}

// bwrap that fails to set the sandbox up is an error of the stage, with
// bwrap's message; an agent that fails or is killed is not.
func TestRunAgentSandboxFails(t *testing.T) {
	sb := requireSandbox(t)
	scratch := agentWorkDir(t)
	if err := sb.enter(scratch); err != nil {
		t.Fatal(err)
	}
	run := func(sb *agentSandbox, command string) (string, string, error) {
		out := &tail{max: 1 << 16}
		status, err := runAgent(context.Background(), command, scratch, []string{"PATH=" + agentDefaultPath}, out, time.Minute, sb, scratch)
		b, _ := out.bytes()
		return status, string(b), err
	}
	bad := *sb
	bad.hide = []hidden{{path: "/nonexistent-whale-test/hidden"}} // bwrap cannot make its mount point
	if status, out, err := run(&bad, "echo ran"); !errors.Is(err, errSandboxSetup) || strings.Contains(out, "ran") || !strings.Contains(out, "bwrap:") {
		t.Errorf("bad sandbox: status %q, err %v, output %q", status, err, out)
	}
	if status, out, err := run(sb, "echo ran; exit 3"); err != nil || status != "failed: exit status 3" || out != "ran\n" {
		t.Errorf("exit 3: status %q, err %v, output %q", status, err, out)
	}
	if status, _, err := run(sb, "kill -KILL $$"); err != nil || !strings.HasPrefix(status, "failed: ") {
		t.Errorf("killed: status %q, err %v", status, err)
	}
	if status, _, err := run(sb, "exec 3>&1; true"); err != nil || !strings.HasPrefix(status, "exited 0") {
		t.Errorf("exit 0: status %q, err %v", status, err)
	}
}

// What is hidden, and the command line that hides it.
func TestAgentSandboxArgs(t *testing.T) {
	base := t.TempDir()
	mk := func(p string) string {
		p = filepath.Join(base, p)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bucket, cache, home := mk("data/bucket"), mk("home/u/.cache/whale"), mk("home/u")
	link := filepath.Join(base, "bucket-link")
	if err := os.Symlink(bucket, link); err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(mk("etc"), "gcp.json")
	write(t, creds, "{}")
	sb := &agentSandbox{bwrap: "/usr/bin/bwrap"}
	if err := sb.prepare(link, []string{cache, home, creds, "", "relative", filepath.Join(base, "missing"), "/", bucket}); err != nil {
		t.Fatal(err)
	}
	got := sb.args("/s", "/s/workspace", "agent --go")
	want := []string{"/usr/bin/bwrap", "--unshare-user", "--unshare-pid", "--unshare-ipc", "--die-with-parent", "--new-session",
		"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
		"--tmpfs", bucket, "--ro-bind", "/dev/null", creds, "--tmpfs", home,
		"--bind", "/s", "/s",
		"--remount-ro", bucket, "--remount-ro", home,
		"--chdir", "/s/workspace", "--json-status-fd", "3", "--", "/bin/sh", "-c", "agent --go"}
	if !slices.Equal(got, want) {
		t.Errorf("args\n%q\nwant\n%q", got, want)
	}
	if d, ok := sb.hiddenPath(filepath.Join(home, "bin")); !ok || d != home {
		t.Errorf("hiddenPath %q %v", d, ok)
	}

	// The system's temporary folder: a private writable tmpfs.
	tmp := &agentSandbox{bwrap: "bwrap"}
	if err := tmp.prepare("", []string{"/tmp", filepath.Join(base, "data")}); err != nil {
		t.Fatal(err)
	}
	got = tmp.args("/tmp/s", "/tmp/s/workspace", "agent")
	want = []string{"--size", strconv.Itoa(agentTmpBytes), "--perms", "1777", "--tmpfs", "/tmp", "--bind", "/tmp/s", "/tmp/s", "--chdir"}
	if i := slices.Index(got, "--size"); i < 0 || !slices.Equal(got[i:i+len(want)], want) {
		t.Errorf("args %q, want %q in them", got, want)
	}

	// A root at / cannot be hidden.
	if err := (&agentSandbox{}).prepare("/", nil); err == nil || !strings.Contains(err.Error(), "whole file system") {
		t.Errorf("root at /: %v", err)
	}
	// Whale root: what nobody cannot reach is left alone.
	private := mk("private")
	if err := os.Chmod(private, 0o700); err != nil {
		t.Fatal(err)
	}
	inside := filepath.Join(private, "cache")
	if err := os.Mkdir(inside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(base), 0o711); err != nil {
		t.Fatal(err)
	}
	root := &agentSandbox{cred: &syscall.Credential{Uid: agentSandboxID, Gid: agentSandboxID}}
	if err := root.prepare(bucket, []string{inside, private}); err != nil {
		t.Fatal(err)
	}
	if want := []hidden{{path: bucket}, {path: private}}; !slices.Equal(root.hide, want) {
		t.Errorf("hidden %v, want %v", root.hide, want)
	}
}

// The default hidden paths: home, /root for root, the temporary
// folders, what the credential variables name.
func TestHidePaths(t *testing.T) {
	env := map[string]string{"HOME": "/home/w", "XDG_RUNTIME_DIR": "/run/user/1000",
		"AWS_SHARED_CREDENTIALS_FILE": "/etc/aws/creds", "KUBECONFIG": "/k/a:/k/b"}
	got := hidePaths(func(k string) string { return env[k] }, true)
	for _, want := range []string{"/home/w", "/root", "/run/user/1000", "/tmp", "/etc/aws/creds", "/k/a", "/k/b", "/run/secrets"} {
		if !slices.Contains(got, want) {
			t.Errorf("hidePaths lacks %s: %v", want, got)
		}
	}
}

func TestStoreDir(t *testing.T) {
	dir := t.TempDir()
	if got := StoreDir(openStore(t, "file://"+dir+"?prefix=team/a")); got != dir {
		t.Errorf("file root with prefix: %q, want %q", got, dir)
	}
	if got := StoreDir(openStore(t, "mem://")); got != "" {
		t.Errorf("mem root: %q", got)
	}
	if got := StoreDir(nil); got != "" {
		t.Errorf("nil: %q", got)
	}
}

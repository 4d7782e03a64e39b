package propose

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/internal/redact"
)

// The agent runs with an allow-list of whale's environment, in a scratch
// folder of its own; what it prints and writes is stored scrubbed.
func TestStageAgentEnvironment(t *testing.T) {
	const (
		awsSecret = "aws-secret-0123456789"
		root      = "s3://private-bucket/runs?region=x"
		apiKey    = "agent-api-key-0123456789"
	)
	t.Setenv("AWS_SECRET_ACCESS_KEY", awsSecret)
	t.Setenv("WHALE_ROOT", root)
	t.Setenv("OTHER_SERVICE_TOKEN", "other-token-0123456789")
	t.Setenv("PROPOSE_TEST_API_KEY", apiKey)
	t.Setenv("HOME", "/home/whale-itself")
	t.Setenv("LANG", "C.UTF-8")

	s := openStore(t, "mem://")
	tasks := commitTasks(t, s)
	// The agent writes its environment into its HOME, which is kept: a
	// sandboxed agent writes nowhere else.
	st := &Stage{Domain: &fakeDomain{}, WorkDir: agentWorkDir(t), AgentTimeout: time.Minute, KeepWorkspace: true}
	cfg := agentConfig(t, 3, "fake-agent-env.sh")
	cfg.AgentEnv = []string{"PROPOSE_TEST_API_KEY", "PROPOSE_TEST_UNSET"}
	m, cands, rej := runStage(t, s, st, cfg, 1, tasks)
	log := readFile(t, s, m, "agent")
	if !strings.HasPrefix(m.Summary["agent_status"].(string), "exited 0") {
		t.Fatalf("agent %v, log:\n%s", m.Summary["agent_status"], log)
	}

	kept, _ := os.ReadDir(st.WorkDir)
	if len(kept) != 1 {
		t.Fatalf("scratch folders kept: %v", kept)
	}
	scratch := filepath.Join(st.WorkDir, kept[0].Name())
	t.Cleanup(func() { _ = removeScratch(scratch) })
	data, err := os.ReadFile(filepath.Join(scratch, "home", "agent.env"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "="); ok {
			env[k] = v
		}
	}
	allowed := []string{"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM", "HOME", "TMPDIR", "PROPOSE_TEST_API_KEY",
		"WHALE_WORKSPACE", "WHALE_CANDIDATES", "WHALE_PROMPT_ONLY", "WHALE_DOMAIN", "WHALE_PARENT", "WHALE_ITERATION",
		"PWD", "OLDPWD", "SHLVL", "_"} // the last four: the shell's own
	for k := range env {
		if !slices.Contains(allowed, k) {
			t.Errorf("the agent got %s", k)
		}
	}
	if strings.Contains(string(data), awsSecret) || strings.Contains(string(data), "private-bucket") {
		t.Errorf("the agent saw whale's credentials or root:\n%s", data)
	}
	if env["PROPOSE_TEST_API_KEY"] != apiKey || env["LANG"] != "C.UTF-8" || env["PATH"] == "" || env["WHALE_CANDIDATES"] != "3" {
		t.Errorf("the agent's environment lacks what it was given:\n%s", data)
	}
	if env["HOME"] != filepath.Join(scratch, "home") ||
		env["TMPDIR"] != filepath.Join(scratch, "tmp") || env["WHALE_WORKSPACE"] != filepath.Join(scratch, "workspace") {
		t.Errorf("HOME %s, TMPDIR %s, workspace %s: want the run's scratch folder %s", env["HOME"], env["TMPDIR"], env["WHALE_WORKSPACE"], scratch)
	}
	for _, f := range []string{"home/was-here", "tmp/was-here"} {
		if _, err := os.Stat(filepath.Join(scratch, f)); err != nil {
			t.Errorf("the agent could not write its HOME or TMPDIR: %v", err)
		}
	}

	// What it printed and wrote is stored without the key or the password.
	if strings.Contains(log, apiKey) || strings.Contains(log, "hunter2") || !strings.Contains(log, "my key is "+redact.Mark) ||
		!strings.Contains(log, "https://"+redact.Mark+"@bucket.example/x") {
		t.Errorf("agent.log:\n%s", log)
	}
	if names(cands) != "quotes-key" || !strings.Contains(cands[0].Hypothesis, redact.Mark) || strings.Contains(cands[0].Hypothesis, apiKey) {
		t.Fatalf("candidates %+v", cands)
	}
	if kinds(rej) != "bad_proposal" || !strings.Contains(rej[0].Reason, "secret") || rej[0].Source != "" {
		t.Fatalf("rejected %+v", rej)
	}
	for _, f := range m.Files {
		if f.Table == "candidates" {
			continue // Parquet: checked decoded above
		}
		if b := readFile(t, s, m, f.Table); strings.Contains(b, apiKey) {
			t.Errorf("%s holds the key:\n%s", f.Table, b)
		}
	}
}

// harvestWithin runs harvest on the workspace ws, failing the test if it
// does not return in time (a FIFO it waits on).
func harvestWithin(t *testing.T, ws string, m int, sc *redact.Scrubber) outcome {
	t.Helper()
	dir, err := os.Open(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	type result struct {
		out outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := harvest(dir, m, sc)
		done <- result{out, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.out
	case <-time.After(20 * time.Second):
		t.Fatal("harvest hangs")
	}
	return outcome{}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func reasons(out outcome) map[string]string {
	r := map[string]string{}
	for _, rej := range out.rejected {
		r[rej.Name] = rej.Kind + ": " + rej.Reason
	}
	return r
}

// Only regular files under their limits are read; everything else is a
// rejection, and nothing waits or reads past a limit.
func TestHarvestRefuses(t *testing.T) {
	ws := t.TempDir()
	outside := t.TempDir()
	newDir := filepath.Join(ws, "new")
	write(t, filepath.Join(newDir, "good", "harness.star"), fakeBaseline)
	write(t, filepath.Join(newDir, "good", "meta.json"), `{"name": "good", "hypothesis": "h", "axis": "turns"}`)

	mustLink := func(target, link string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	mustFIFO := func(path string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(path, 0o600); err != nil {
			t.Skipf("no FIFO here: %v", err)
		}
	}
	mustHuge := func(path string) {
		t.Helper()
		write(t, path, "")
		// Sparse: reading it whole would take minutes and all the memory.
		if err := os.Truncate(path, 1<<36); err != nil {
			t.Skipf("no sparse file here: %v", err)
		}
	}
	mustLink("/etc/passwd", filepath.Join(newDir, "passwd", "harness.star"))
	mustFIFO(filepath.Join(newDir, "fifo", "harness.star"))
	mustHuge(filepath.Join(newDir, "huge", "harness.star"))
	write(t, filepath.Join(newDir, "meta-link", "harness.star"), fakeBaseline)
	mustLink("/etc/passwd", filepath.Join(newDir, "meta-link", "meta.json"))
	write(t, filepath.Join(newDir, "meta-fifo", "harness.star"), fakeBaseline)
	mustFIFO(filepath.Join(newDir, "meta-fifo", "meta.json"))
	write(t, filepath.Join(newDir, "meta-huge", "harness.star"), fakeBaseline)
	mustHuge(filepath.Join(newDir, "meta-huge", "meta.json"))
	write(t, filepath.Join(outside, "elsewhere", "harness.star"), fakeBaseline)
	mustLink(filepath.Join(outside, "elsewhere"), filepath.Join(newDir, "dir-link"))
	mustFIFO(filepath.Join(newDir, "a-fifo"))
	write(t, filepath.Join(newDir, "a-file"), "x")

	out := harvestWithin(t, ws, 3, nil)
	if len(out.proposals) != 1 || out.proposals[0].Name != "good" {
		t.Fatalf("proposals %+v", out.proposals)
	}
	want := map[string]string{
		"passwd":    "harness.star is a symbolic link, not a regular file",
		"fifo":      "harness.star is a named pipe, not a regular file",
		"huge":      fmt.Sprintf("harness.star is %d bytes, more than the limit of %d", int64(1<<36), harness.MaxSourceBytes),
		"meta-link": "meta.json is a symbolic link, not a regular file",
		"meta-fifo": "meta.json is a named pipe, not a regular file",
		"meta-huge": fmt.Sprintf("meta.json is %d bytes, more than the limit of %d", int64(1<<36), agentMetaBytes),
		"dir-link":  "new/dir-link is a symbolic link, not a folder",
		"a-fifo":    "new/a-fifo is a named pipe, not a folder",
		"a-file":    "new/a-file is a file, not a folder",
	}
	got := reasons(out)
	for name, w := range want {
		if !strings.HasPrefix(got[name], RejectProposalBad+": ") || !strings.Contains(got[name], w) {
			t.Errorf("%s: %q, want %q", name, got[name], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("rejected %v", got)
	}
	for _, r := range out.rejected {
		if strings.Contains(r.Source, "root:") {
			t.Errorf("%s: /etc/passwd read: %q", r.Name, r.Source)
		}
	}
}

// More entries in new/ than any M allows: nothing is read.
func TestHarvestTooMany(t *testing.T) {
	ws := t.TempDir()
	for i := range agentMaxEntries + 1 {
		write(t, filepath.Join(ws, "new", fmt.Sprintf("c%03d", i), "harness.star"), fakeBaseline)
	}
	out := harvestWithin(t, ws, 2, nil)
	if len(out.proposals) != 0 || len(out.rejected) != 1 || out.rejected[0].Kind != RejectOverLimit ||
		!strings.Contains(out.rejected[0].Reason, fmt.Sprintf("more than %d entries", agentMaxEntries)) {
		t.Fatalf("proposals %d, rejected %+v", len(out.proposals), out.rejected)
	}
	// At the limit, the candidates beyond m are rejected one by one.
	if err := os.RemoveAll(filepath.Join(ws, "new", "c000")); err != nil {
		t.Fatal(err)
	}
	out = harvestWithin(t, ws, 2, nil)
	if len(out.proposals) != 2 || len(out.rejected) != agentMaxEntries-2 || out.rejected[0].Kind != RejectOverLimit {
		t.Fatalf("proposals %d, rejected %d", len(out.proposals), len(out.rejected))
	}
}

// new/ itself a link elsewhere: nothing is read.
func TestHarvestNewIsLink(t *testing.T) {
	ws, outside := t.TempDir(), t.TempDir()
	write(t, filepath.Join(outside, "c", "harness.star"), fakeBaseline)
	if err := os.Symlink(outside, filepath.Join(ws, "new")); err != nil {
		t.Fatal(err)
	}
	out := harvestWithin(t, ws, 2, nil)
	if len(out.proposals) != 0 || len(out.rejected) != 1 || !strings.Contains(out.rejected[0].Reason, "new is a symbolic link, not a folder") {
		t.Fatalf("proposals %+v, rejected %+v", out.proposals, out.rejected)
	}
}

func TestTailKeepsLast(t *testing.T) {
	tl := &tail{max: 10}
	var all []byte
	for i := range 100 {
		p := []byte(strings.Repeat(string(rune('a'+i%26)), i%13))
		all = append(all, p...)
		tl.Write(p)
	}
	b, cut := tl.bytes()
	if string(b) != string(all[len(all)-10:]) || cut != int64(len(all)-10) || cap(tl.buf) > 64 {
		t.Fatalf("tail %q cut %d (cap %d), want %q cut %d", b, cut, cap(tl.buf), all[len(all)-10:], len(all)-10)
	}
}

func TestAgentEnv(t *testing.T) {
	whale := map[string]string{"LANG": "C", "AWS_ACCESS_KEY_ID": "AKIA…", "WHALE_ROOT": "s3://b", "MY_KEY": "k", "HOME": "/home/w"}
	lookup := func(k string) (string, bool) { v, ok := whale[k]; return v, ok }
	env, missing := agentEnv(lookup, []string{"MY_KEY", "AWS_ACCESS_KEY_ID", "WHALE_ROOT", "HOME", "NOT_SET", "MY_KEY"}, "/s/home", "/s/tmp", "WHALE_WORKSPACE=/s/workspace")
	want := []string{"LANG=C", "PATH=" + agentDefaultPath, "MY_KEY=k", "HOME=/s/home", "TMPDIR=/s/tmp", "WHALE_WORKSPACE=/s/workspace"}
	if !slices.Equal(env, want) || !slices.Equal(missing, []string{"NOT_SET"}) {
		t.Fatalf("env %q missing %q, want %q", env, missing, want)
	}
}

func TestCheckAgentEnv(t *testing.T) {
	for name, want := range map[string]string{
		"ANTHROPIC_API_KEY":              "",
		"https_proxy":                    "",
		"OPENAI_API_KEY":                 "",
		"sk-ant-0123":                    "must name an environment variable",
		"1X":                             "must name an environment variable",
		"":                               "must name an environment variable",
		"AWS_SECRET_ACCESS_KEY":          "must not reach whale's bucket",
		"aws_profile":                    "must not reach whale's bucket",
		"AZURE_STORAGE_KEY":              "must not reach whale's bucket",
		"GOOGLE_APPLICATION_CREDENTIALS": "must not reach whale's bucket",
		"WHALE_ROOT":                     "WHALE_ROOT names the bucket",
		"HOME":                           "set by whale",
		"TMPDIR":                         "set by whale",
	} {
		err := CheckAgentEnv(name)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%q: %v, want %q", name, err, want)
		}
		if err != nil && !envNameRE.MatchString(name) && name != "" && strings.Contains(err.Error(), name) {
			t.Errorf("%q: the error repeats what may be a secret: %v", name, err)
		}
	}
}

// An empty AgentEnv leaves the hashed config, and so existing stages'
// identities, as it was.
func TestConfigAgentEnvOmitted(t *testing.T) {
	cfg := Config{Backend: BackendAgent, M: 2, Parent: ParentH0, Domain: "fake", AgentCommand: "agent"}
	before, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"backend":"agent","m":2,"prompt_only":false,"parent":"h0","iteration":0,"domain":"fake","agent_command":"agent"}`; string(before) != want {
		t.Fatalf("config JSON %s, want %s", before, want)
	}
	cfg.AgentEnv = []string{}
	if after, _ := json.Marshal(cfg); !bytes.Equal(after, before) {
		t.Errorf("an empty agent_env changes the JSON: %s", after)
	}
}

// Folders the agent left read-only (a Go module cache) are removed too.
func TestRemoveScratch(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "scratch")
	write(t, filepath.Join(dir, "home", "go", "pkg", "mod", "m@v1", "f.go"), "package m")
	for _, d := range []string{"home/go/pkg/mod/m@v1", "home/go/pkg/mod", "home"} {
		if err := os.Chmod(filepath.Join(dir, d), 0o555); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc", filepath.Join(dir, "etc")); err != nil {
		t.Fatal(err)
	}
	if err := removeScratch(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !os.IsNotExist(err) {
		t.Fatalf("scratch left: %v", err)
	}
	if _, err := os.Stat("/etc/passwd"); err != nil {
		t.Fatalf("/etc: %v", err)
	}
}

// WHALE_AGENT_ENV adds names for this process; refused ones are left out
// with a warning.
func TestRuntimeAgentEnv(t *testing.T) {
	t.Setenv(AgentEnvEnv, " ANTHROPIC_API_KEY, AWS_SECRET_ACCESS_KEY,,CLAUDE_CONFIG_DIR ")
	var logs bytes.Buffer
	got := runtimeAgentEnv(slog.New(slog.NewTextHandler(&logs, nil)))
	if !slices.Equal(got, []string{"ANTHROPIC_API_KEY", "CLAUDE_CONFIG_DIR"}) {
		t.Fatalf("names %q", got)
	}
	if !strings.Contains(logs.String(), "AWS_SECRET_ACCESS_KEY") {
		t.Errorf("no warning for the refused name:\n%s", logs.String())
	}
}

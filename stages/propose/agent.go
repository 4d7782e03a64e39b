package propose

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/whalerun/whale/internal/redact"
	"github.com/whalerun/whale/stages"
)

// DefaultAgentTimeout bounds an agent run when Stage.AgentTimeout is 0.
const DefaultAgentTimeout = time.Hour

// agentLogBytes is how much of the agent's output the stage keeps (the
// tail) in agent.log; the rest is never stored, on disk or in memory.
const agentLogBytes = 256 << 10

// agentTraceBytes bounds each trace file of the workspace.
const agentTraceBytes = 20000

// checkAgent checks the agent backend's settings.
func (c Config) checkAgent() []error {
	var errs []error
	if strings.TrimSpace(c.AgentCommand) == "" {
		errs = append(errs, errors.New("agent_command is empty: the agent backend runs it in the workspace"))
	}
	for i, name := range c.AgentEnv {
		if err := CheckAgentEnv(name); err != nil {
			errs = append(errs, fmt.Errorf("agent_env[%d]: %w", i, err))
		}
	}
	return errs
}

// agent is the agent backend: it writes the workspace, runs the agent
// command in it and harvests new/*/.
//
// The agent runs in a scratch folder of its own, new for each run and
// removed afterwards unless Stage.KeepWorkspace: workspace/ (the files of
// writeWorkspace, copies: nothing in it links elsewhere), home/ (its HOME)
// and tmp/ (its TMPDIR). Its environment is an allow-list (agentEnv): no
// bucket credentials, no WHALE_ROOT, no model keys but those
// Config.AgentEnv names. What it writes comes back through harvest's
// limits, and its output and its text pass through the scrubber of
// whale's secret variables before they are stored.
//
// The agent runs under bubblewrap (agentSandbox) where this machine can:
// it sees the machine read-only but not whale's home, caches and
// temporary files, the directory of a file:// root (RootDir) nor the
// folders of Hide, and writes only to its scratch folder. Without
// bubblewrap a file:// root is refused (ErrNoAgentSandbox); any other
// root runs the agent as whale's user, with a warning.
func (s *Stage) agent(ctx context.Context, x *stages.Exec, in *input) (outcome, error) {
	sb, err := s.useSandbox(ctx, in.log)
	if err != nil {
		return outcome{}, err
	}
	root, err := os.MkdirTemp(s.WorkDir, "whale-propose-")
	if err != nil {
		return outcome{}, fmt.Errorf("propose: agent workspace: %w", err)
	}
	// The sandbox binds it at its real path, the one the agent is told.
	if real, err := filepath.EvalSymlinks(root); err == nil {
		root = real
	}
	if s.KeepWorkspace {
		in.log.Info("agent workspace kept", "dir", root)
	} else {
		defer func() {
			if err := removeScratch(root); err != nil {
				in.log.Warn("agent workspace not removed", "dir", root, "err", err)
			}
		}()
	}
	ws, home, tmp := filepath.Join(root, "workspace"), filepath.Join(root, "home"), filepath.Join(root, "tmp")
	if err := writeWorkspace(ws, in); err != nil {
		return outcome{}, fmt.Errorf("propose: agent workspace %s: %w", ws, err)
	}
	for _, d := range []string{home, tmp} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return outcome{}, fmt.Errorf("propose: agent scratch: %w", err)
		}
	}
	// The workspace as whale made it, whatever the agent renames or
	// links in its place.
	wsDir, err := os.Open(ws)
	if err != nil {
		return outcome{}, fmt.Errorf("propose: agent workspace: %w", err)
	}
	defer wsDir.Close()

	promptOnly := "0"
	if in.cfg.PromptOnly {
		promptOnly = "1"
	}
	names := append(slices.Clone(in.cfg.AgentEnv), runtimeAgentEnv(in.log)...)
	env, missing := agentEnv(os.LookupEnv, names, home, tmp,
		"WHALE_WORKSPACE="+ws,
		"WHALE_CANDIDATES="+strconv.Itoa(in.cfg.M),
		"WHALE_PROMPT_ONLY="+promptOnly,
		"WHALE_DOMAIN="+in.cfg.Domain,
		"WHALE_PARENT="+in.parent.ID(),
		"WHALE_ITERATION="+strconv.Itoa(in.cfg.Iteration),
	)
	if len(missing) > 0 {
		in.log.Warn("agent_env names variables whale's environment does not have", "names", missing)
	}
	sc := redact.Secrets(os.Environ())

	timeout := s.AgentTimeout
	if timeout <= 0 {
		timeout = DefaultAgentTimeout
	}
	output := &tail{max: agentLogBytes + sc.Longest()}
	sandbox := "none"
	if sb != nil {
		if err := sb.enter(root); err != nil {
			return outcome{}, err
		}
		sb.warnHiddenPath(env, in.log)
		sandbox = "bwrap"
	}
	status, err := runAgent(ctx, in.cfg.AgentCommand, ws, env, output, timeout, sb, root)
	if errors.Is(err, errSandboxSetup) {
		b, _ := output.bytes()
		return outcome{}, fmt.Errorf("propose: the agent's sandbox failed: bwrap ended without reporting the agent's exit: %s", sc.Text(lastOutputLine(b)))
	}
	if err != nil {
		return outcome{}, err
	}
	in.log.Info("agent finished", "status", status, "sandbox", sandbox)
	if strings.HasPrefix(status, "failed") && len(names) == 0 {
		// The usual cause: an agent CLI without its API key, which no
		// variable of whale's environment reaches unless named.
		in.log.Warn("the agent failed and was given no variables: name its API key in harness.agent.env or "+AgentEnvEnv,
			"status", status)
	}
	if err := uploadLog(ctx, x, output, sc); err != nil {
		return outcome{}, err
	}

	out, err := harvest(wsDir, in.cfg.M, sc)
	if err != nil {
		return outcome{}, err
	}
	if len(out.proposals) == 0 && len(out.rejected) == 0 {
		out.rejected = append(out.rejected, Rejection{Name: "agent", Kind: RejectAgentQuiet,
			Reason: fmt.Sprintf("agent wrote nothing (agent %s)", status)})
	}
	out.summary = map[string]any{"agent_status": status, "agent_sandbox": sandbox}
	return out, nil
}

// errSandboxSetup is runAgent's error when bwrap ended without running
// the agent: its own message is the last line of the output.
var errSandboxSetup = errors.New("the agent's sandbox was not set up")

// runAgent runs command in ws with the environment env, its output (both
// streams) going to output, and says how it ended: "exited 0", "exited
// 3", "timed out after 1h0m0s". With sb it runs under bubblewrap, in the
// scratch folder scratch (sb.args). Only a command that could not start
// at all (errSandboxSetup: bwrap could not set up), or a cancelled stage,
// is an error.
func runAgent(ctx context.Context, command, ws string, env []string, output io.Writer, timeout time.Duration, sb *agentSandbox, scratch string) (string, error) {
	// The agent writes to a pipe whale reads into output: its output
	// never lands whole on disk. The pipe is an *os.File, so that Wait
	// does not wait on a grandchild that keeps it open.
	pr, pw, err := os.Pipe()
	if err != nil {
		return "", fmt.Errorf("propose: agent output: %w", err)
	}
	defer pr.Close()
	// Under bwrap, bwrap reports on a second pipe whether the agent ran.
	var sr, sw *os.File
	if sb != nil {
		if sr, sw, err = os.Pipe(); err != nil {
			pw.Close()
			return "", fmt.Errorf("propose: agent sandbox status: %w", err)
		}
		defer sr.Close()
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(output, pr)
	}()
	var statusText bytes.Buffer
	statusRead := make(chan struct{})
	go func() {
		defer close(statusRead)
		if sr != nil {
			_, _ = io.Copy(&statusText, io.LimitReader(sr, 1<<16))
		}
	}()

	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var cmd *exec.Cmd
	if sb == nil {
		cmd = exec.CommandContext(actx, "/bin/sh", "-c", command)
		cmd.Dir = ws
		// The agent gets its own process group so that a timeout ends
		// everything it started, not just the shell.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	} else {
		// bwrap gets the process group: the timeout's signal ends it, and
		// with it the sandbox's PID namespace (--die-with-parent), all
		// the agent started, setsid or not. bwrap dies with whale
		// (Pdeathsig). The environment reaches the agent through bwrap's,
		// never its command line, which every user may read.
		args := sb.args(scratch, ws, command)
		cmd = exec.CommandContext(actx, args[0], args[1:]...)
		cmd.Dir = "/"
		cmd.ExtraFiles = []*os.File{sw} // fd 3: --json-status-fd 3
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: sb.cred}
	}
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = pw, pw
	var hardKill *time.Timer
	cmd.Cancel = func() error {
		killGroup(cmd.Process.Pid, syscall.SIGTERM)
		hardKill = time.AfterFunc(2*time.Second, func() { killGroup(cmd.Process.Pid, syscall.SIGKILL) })
		return nil
	}
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err = cmd.Start()
	pw.Close() // the agent holds the write end now
	if sw != nil {
		sw.Close() // and bwrap this one
	}
	if err != nil {
		<-copied
		<-statusRead
		return "", fmt.Errorf("propose: start agent command: %w", err)
	}
	err = cmd.Wait()
	if hardKill != nil {
		hardKill.Stop()
	}
	// Whatever the agent left running in its group goes with it; what
	// left the group and keeps the output open is cut off shortly after.
	killGroup(cmd.Process.Pid, syscall.SIGKILL)
	_ = pr.SetReadDeadline(time.Now().Add(2 * time.Second))
	if sr != nil {
		_ = sr.SetReadDeadline(time.Now().Add(2 * time.Second))
	}
	<-copied
	<-statusRead
	switch {
	case ctx.Err() != nil:
		return "", fmt.Errorf("propose: agent: %w", ctx.Err())
	case actx.Err() != nil:
		return fmt.Sprintf("timed out after %s", timeout), nil
	case sb != nil && !bytes.Contains(statusText.Bytes(), []byte(`"exit-code"`)):
		return "", errSandboxSetup
	case err == nil:
		return fmt.Sprintf("exited 0 after %s", time.Since(start).Round(time.Millisecond)), nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return fmt.Sprintf("failed: %s", ee.ProcessState), nil
	}
	return fmt.Sprintf("failed: %v", err), nil
}

func killGroup(pid int, sig syscall.Signal) {
	if pid > 0 {
		_ = syscall.Kill(-pid, sig) // ESRCH: the group is gone already
	}
}

// tail is an io.Writer that keeps the last max bytes written to it.
type tail struct {
	max   int
	buf   []byte
	total int64
}

func (t *tail) Write(p []byte) (int, error) {
	t.total += int64(len(p))
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return len(p), nil
	}
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

// bytes returns the last max bytes and how many bytes before them are gone.
func (t *tail) bytes() ([]byte, int64) {
	b := t.buf
	if len(b) > t.max {
		b = b[len(b)-t.max:]
	}
	return b, t.total - int64(len(b))
}

// agentLog is the text of agent.log: the tail of the agent's output,
// scrubbed by sc. Where the output was cut, the first sc.Longest() bytes
// of the tail go too, and the rest of that line: a secret cut in two
// would be too short to be found.
func agentLog(t *tail, sc *redact.Scrubber) string {
	b, cut := t.bytes()
	head := ""
	if cut > 0 {
		drop := min(sc.Longest(), len(b))
		if i := bytes.IndexByte(b[drop:min(len(b), drop+4096)], '\n'); i >= 0 {
			drop += i + 1
		}
		b, cut = b[drop:], cut+int64(drop)
		head = fmt.Sprintf("[whale: the agent wrote %d bytes; the first %d are cut]\n", t.total, cut)
	}
	return head + sc.Text(string(b))
}

// uploadLog stores agentLog as agent.log.
func uploadLog(ctx context.Context, x *stages.Exec, t *tail, sc *redact.Scrubber) error {
	w, err := x.Create(ctx, "agent.log")
	if err != nil {
		return err
	}
	if _, err := io.WriteString(w, agentLog(t, sc)); err != nil {
		w.Abort()
		return fmt.Errorf("propose: agent log: %w", err)
	}
	return w.Close()
}

// writeWorkspace lays out what the agent reads:
//
//	SKILL.md            the rules and where to write
//	CONTRACT.md         the domain's hook contract
//	frontier.json       every scored harness, frontier flags, best first
//	evolution_log.md    every prior candidate: parent, axis, hypothesis, score
//	candidates/<dir>/   harness.star, scores.json, traces/*.txt
//	new/                empty: new/<name>/harness.star + meta.json go here
func writeWorkspace(ws string, in *input) error {
	a := in.arch
	dirs := candidateDirs(a, in.parent.ID(), string(in.parent.Source()))
	files := map[string][]byte{
		"SKILL.md":         []byte(skill(in, dirs)),
		"CONTRACT.md":      []byte(in.contract.Doc() + "\n"),
		"evolution_log.md": []byte(evolutionLog(a, dirs, in.parent.ID())),
	}
	type front struct {
		Dir        string   `json:"dir"`
		HarnessID  string   `json:"harness_id"`
		Name       string   `json:"name"`
		Axis       string   `json:"axis,omitempty"`
		Success    *float64 `json:"success"`
		MeanTurns  *float64 `json:"mean_turns"`
		Tasks      int      `json:"tasks"`
		OnFrontier bool     `json:"on_frontier"`
		Winner     bool     `json:"winner"`
		Parent     bool     `json:"is_parent"`
	}
	var fronts []front
	for _, id := range append(a.ranked(), unscored(a, dirs)...) {
		f := front{Dir: "candidates/" + dirs[id], HarnessID: id, Name: a.sources[id].Name, Axis: a.sources[id].Axis, Parent: id == in.parent.ID()}
		if dirs[id] == "" {
			f.Dir = ""
		}
		if s := a.scores[id]; s != nil {
			succ, turns := s.Success(), s.Turns()
			f.Success, f.MeanTurns, f.Tasks, f.OnFrontier, f.Winner = &succ, &turns, s.tasks, s.OnFrontier, s.Winner
		}
		fronts = append(fronts, f)
	}
	data, err := json.MarshalIndent(map[string]any{"candidates": fronts}, "", "  ")
	if err != nil {
		return err
	}
	files["frontier.json"] = append(data, '\n')

	for id, dir := range dirs {
		c := a.sources[id]
		src := c.Source
		if id == in.parent.ID() {
			src = string(in.parent.Source())
		}
		base := filepath.Join("candidates", dir)
		files[filepath.Join(base, "harness.star")] = []byte(src)
		sc := map[string]any{
			"harness_id": id, "name": c.Name, "parent_id": c.ParentID, "axis": c.Axis,
			"hypothesis": c.Hypothesis, "proposer": c.Proposer, "evaluated": false, "is_parent": id == in.parent.ID(),
		}
		if s := a.scores[id]; s != nil {
			sc["evaluated"], sc["success"], sc["mean_turns"], sc["tasks"] = true, s.Success(), s.Turns(), s.tasks
			sc["on_frontier"], sc["winner"] = s.OnFrontier, s.Winner
		}
		data, err := json.MarshalIndent(sc, "", "  ")
		if err != nil {
			return err
		}
		files[filepath.Join(base, "scores.json")] = append(data, '\n')
		if smp := a.samples[id]; smp != nil {
			for i, r := range smp.failed {
				files[filepath.Join(base, "traces", fmt.Sprintf("fail-%d-%s.txt", i+1, fileSafe(r.TaskID)))] = []byte(renderEpisode(r, agentTraceBytes))
			}
			for i, r := range smp.passed {
				files[filepath.Join(base, "traces", fmt.Sprintf("pass-%d-%s.txt", i+1, fileSafe(r.TaskID)))] = []byte(renderEpisode(r, agentTraceBytes))
			}
		}
	}
	if err := os.MkdirAll(filepath.Join(ws, "new"), 0o755); err != nil {
		return err
	}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range files {
			if !yield(k) {
				return
			}
		}
	}) {
		p := filepath.Join(ws, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, files[name], 0o644); err != nil {
			return err
		}
	}
	return nil
}

// candidateDirs names a folder for every harness whose source is known:
// "<name>-<first 8 hex digits>".
func candidateDirs(a *archive, parentID, parentSrc string) map[string]string {
	dirs := map[string]string{}
	for id, c := range a.sources {
		if c.Source == "" {
			continue
		}
		dirs[id] = dirName(c.Name, id)
	}
	if _, ok := dirs[parentID]; !ok && parentSrc != "" {
		dirs[parentID] = dirName("parent", parentID)
	}
	return dirs
}

func dirName(name, id string) string {
	hex := strings.TrimPrefix(id, "sha256:")
	n := sanitizeName(name)
	if n == "" {
		n = "harness"
	}
	return n + "-" + hex[:min(8, len(hex))]
}

func unscored(a *archive, dirs map[string]string) []string {
	var ids []string
	for _, id := range a.order {
		if a.scores[id] == nil && dirs[id] != "" {
			ids = append(ids, id)
		}
	}
	return ids
}

var unsafeFile = strings.NewReplacer("/", "_", "\\", "_", ":", "_", " ", "_", "\x00", "_")

func fileSafe(s string) string {
	s = unsafeFile.Replace(s)
	if len(s) > 60 {
		s = s[:60]
	}
	if s == "" || s == "." || s == ".." {
		s = "task"
	}
	return s
}

func evolutionLog(a *archive, dirs map[string]string, parentID string) string {
	var b strings.Builder
	b.WriteString("# Evolution log\n\nEvery harness of this phase so far, in the order it was proposed. ")
	b.WriteString("Success is the mean reward on the search set (higher is better); turns is the mean number of model calls (lower is better).\n\n")
	b.WriteString("| candidate | folder | parent | proposed at | axis | hypothesis | success | mean turns | frontier |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, id := range a.order {
		c := a.sources[id]
		parent := ""
		if c.ParentID != "" {
			parent = describe(a, c.ParentID)
		}
		succ, turns, fr := "not scored", "", ""
		if s := a.scores[id]; s != nil {
			succ, turns = fmt.Sprintf("%.3f", s.Success()), fmt.Sprintf("%.2f", s.Turns())
			if s.OnFrontier {
				fr = "yes"
			}
			if s.Winner {
				fr += " (best)"
			}
		}
		name := describe(a, id)
		if id == parentID {
			name += " **parent**"
		}
		folder := ""
		if dirs[id] != "" {
			folder = "candidates/" + dirs[id]
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", name, folder, parent, c.Position, c.Axis, oneLine(c.Hypothesis, 300), succ, turns, fr)
	}
	return b.String()
}

func skill(in *input, dirs map[string]string) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, `# Skill: propose harness candidates (%s domain)

You are improving the *harness* of an agent: the Starlark code that decides what the model sees and
how its replies are read. The model and the environment are fixed. Read the workspace, diagnose why
episodes fail, and write %d new candidate harnesses.

## What is here

- CONTRACT.md: the hook contract: every constant and hook a harness may define, its defaults, the
  state dict and the helpers. Harness code that breaks it is discarded.
- frontier.json: every scored harness, best first, with success rate, mean turns and Pareto-frontier flags.
- evolution_log.md: every candidate tried so far: its parent, axis, hypothesis and score.
- candidates/<name>-<id>/: harness.star (the source), scores.json, traces/*.txt (sampled failed and
  passed episodes as text: messages, hook calls, tool calls, errors).
- The parent to improve is candidates/%s/harness.star.

## Rules

%s
## Where to write

For each new candidate write
  new/<name>/harness.star   the complete harness (not a diff)
  new/<name>/meta.json      {"name": "<name>", "hypothesis": "<one sentence>", "axis": "<axis>"}
with <name> short kebab-case (letters, digits, dashes). Write at most %d candidates; anything outside
new/ is ignored. You may run `+"`whale harness check <file> --domain %s`"+` if it is on PATH.
`, in.contract.Name, in.cfg.M, dirs[in.parent.ID()], rules(in.cfg, in.contract.Name), in.cfg.M, in.contract.Name)
	return b.String()
}

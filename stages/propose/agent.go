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
	"github.com/whalerun/whale/stages/internal/play"
)

// DefaultAgentTimeout bounds an agent run when Stage.AgentTimeout is 0.
const DefaultAgentTimeout = time.Hour

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
// limits, and its output (logWriter, streamed into agent.log as it
// comes) and its text pass through the scrubber of whale's secret
// variables before they are stored. While it runs, a prototyper plays
// the ./try requests it writes (Config.Prototype), and stops when it
// ends.
//
// The agent runs under bubblewrap (agentSandbox) where this machine can:
// it sees the machine read-only but not whale's home, caches and
// temporary files, the directory of a file:// root (RootDir) nor the
// folders of Hide, and writes only to its scratch folder. Without
// bubblewrap a file:// root is refused (ErrNoAgentSandbox); any other
// root runs the agent as whale's user, with a warning.
func (s *Stage) agent(ctx context.Context, x *stages.Exec, in *input) (outcome, error) {
	if p := in.cfg.Prototype; p != nil {
		if err := play.CheckModel(s.Model, p.ModelName); err != nil {
			return outcome{}, fmt.Errorf("propose: the agent's prototypes: %w", err)
		}
	}
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
	sc := redact.Secrets(os.Environ(), s.SecretEnv...)
	ws, home, tmp := filepath.Join(root, "workspace"), filepath.Join(root, "home"), filepath.Join(root, "tmp")
	dirs := candidateDirs(in.arch, in.parent.ID(), string(in.parent.Source()))
	if err := writeWorkspace(ws, in, dirs); err != nil {
		return outcome{}, fmt.Errorf("propose: agent workspace %s: %w", ws, err)
	}
	tasks, err := writeTaskList(ctx, x, ws)
	if err != nil {
		return outcome{}, err
	}
	traj, err := writeTrajectories(ctx, x, ws, dirs, sc, agentTrajectoryBounds)
	if err != nil {
		return outcome{}, err
	}
	in.log.Info("agent workspace written", "candidates", len(dirs), "trajectory_files", traj.files, "episodes", traj.episodes,
		"episodes_outcome_only", traj.omitted, "trajectory_bytes", traj.bytes, "search_tasks", tasks)
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
	var proto *prototyper
	if p := in.cfg.Prototype; p != nil {
		reqs, err := os.Open(filepath.Join(ws, "prototype", "requests"))
		if err != nil {
			return outcome{}, fmt.Errorf("propose: agent workspace: %w", err)
		}
		defer reqs.Close()
		proto = &prototyper{cfg: *p, dom: s.Domain, model: s.Model, x: x, reqs: reqs, sc: sc, log: in.log, seen: map[string]bool{}}
	}

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

	timeout := s.AgentTimeout
	if timeout <= 0 {
		timeout = DefaultAgentTimeout
	}
	logFile, err := x.Create(ctx, "agent.log")
	if err != nil {
		return outcome{}, err
	}
	logDone := false
	defer func() {
		if !logDone {
			logFile.Abort()
		}
	}()
	output := newLogWriter(logFile, sc, agentLogBytes)
	sandbox := "none"
	if sb != nil {
		if err := sb.enter(root); err != nil {
			return outcome{}, err
		}
		sb.warnHiddenPath(env, in.log)
		sandbox = "bwrap"
	}
	// Prototypes are played while the agent runs, and not after.
	pctx, stopProto := context.WithCancel(ctx)
	served := make(chan struct{})
	go func() {
		defer close(served)
		if proto != nil {
			proto.serve(pctx)
		}
	}()
	status, err := runAgent(ctx, in.cfg.AgentCommand, ws, env, output, timeout, sb, root)
	stopProto()
	<-served
	if errors.Is(err, errSandboxSetup) {
		return outcome{}, fmt.Errorf("propose: the agent's sandbox failed: bwrap ended without reporting the agent's exit: %s", output.lastLine())
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
	if err := output.Close(); err != nil {
		return outcome{}, fmt.Errorf("propose: agent log: %w", err)
	}
	logDone = true
	if err := logFile.Close(); err != nil {
		return outcome{}, fmt.Errorf("propose: agent log: %w", err)
	}

	out, err := harvest(wsDir, in.cfg.M, sc)
	if err != nil {
		return outcome{}, err
	}
	if len(out.proposals) == 0 && len(out.rejected) == 0 {
		out.rejected = append(out.rejected, Rejection{Name: "agent", Kind: RejectAgentQuiet,
			Reason: fmt.Sprintf("agent wrote nothing (agent %s)", status)})
	}
	out.summary = map[string]any{"agent_status": status, "agent_sandbox": sandbox, "agent_log_bytes": output.tail.total}
	if proto != nil {
		out.summary["prototype_episodes"] = proto.used
		out.summary["prototype_requests"] = proto.requests
	}
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

// writeWorkspace lays out what the agent reads (writeTrajectories and
// writeTaskList add candidates/<dir>/trajectories.jsonl and
// search_tasks.txt):
//
//	SKILL.md            the rules, ./try and where to write
//	CONTRACT.md         the domain's hook contract
//	frontier.json       every scored harness, frontier flags, best first
//	evolution_log.md    every prior candidate: parent, axis, hypothesis, score
//	candidates/<dir>/   harness.star, scores.json (trajectories.jsonl)
//	try, prototype/requests/
//	                    with Config.Prototype: the prototype command and
//	                    the folder its requests go to
//	new/                empty: new/<name>/harness.star + meta.json go here
func writeWorkspace(ws string, in *input, dirs map[string]string) error {
	a := in.arch
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
		if src != "" {
			files[filepath.Join(base, "harness.star")] = []byte(src)
		}
		sc := map[string]any{
			"harness_id": id, "name": c.Name, "parent_id": c.ParentID, "axis": c.Axis,
			"hypothesis": c.Hypothesis, "proposer": c.Proposer, "evaluated": false, "is_parent": id == in.parent.ID(),
			"source_known": src != "",
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
	}
	if err := os.MkdirAll(filepath.Join(ws, "new"), 0o755); err != nil {
		return err
	}
	if in.cfg.Prototype != nil {
		if err := os.MkdirAll(filepath.Join(ws, "prototype", "requests"), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(ws, "try"), []byte(tryScript), 0o755); err != nil {
			return err
		}
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

// candidateDirs names a folder for every harness whose source is known
// or that was scored: "<name>-<first 8 hex digits>".
func candidateDirs(a *archive, parentID, parentSrc string) map[string]string {
	dirs := map[string]string{}
	for id, c := range a.sources {
		if c.Source == "" && a.scores[id] == nil {
			continue
		}
		dirs[id] = dirName(c.Name, id)
	}
	for id := range a.scores {
		if _, ok := dirs[id]; !ok {
			dirs[id] = dirName("harness", id)
		}
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
episodes fail, prototype your changes, and write %d new candidate harnesses.

## What is here

- CONTRACT.md: the hook contract: every constant and hook a harness may define, its defaults, the
  state dict and the helpers. Harness code that breaks it is discarded.
- frontier.json: every scored harness, best first, with success rate, mean turns and Pareto-frontier flags.
- evolution_log.md: every candidate tried so far: its parent, axis, hypothesis and score.
- candidates/<name>-<id>/: harness.star (the source), scores.json (its scores on the search set) and
  trajectories.jsonl: every search-set episode it played, one JSON object a line: task_id, sample,
  seed, reward, correct, answer (the graded answer), finish_reason, error, turns, tokens, messages
  (role, content, reasoning, tool_calls), trace (every hook call, model call, tool call and error, with
  what the harness fed back) and tools (the native tools offered). A line with "clipped": true had
  its long texts cut (head and tail kept); one with "omitted" keeps only the outcome, for the reason
  it gives (a size bound). Use jq, grep or python on them.
- search_tasks.txt: the id of every search-set task, one a line.
- The parent to improve is candidates/%s/harness.star.

`, in.contract.Name, in.cfg.M, dirs[in.parent.ID()])
	if p := in.cfg.Prototype; p != nil {
		fmt.Fprintf(&b, `## Prototype before you propose

Run a harness on chosen search-set tasks, against the same model, tools and settings the evaluation uses:

    ./try HARNESS_FILE TASK_ID [TASK_ID ...]

It plays each task once (name an id twice for a second sample), prints reward, turns and how each
episode ended, and leaves the episodes in prototype/requests/<request>/trajectories.jsonl (same
format as above). A harness that does not load costs nothing and prints why. This stage has a budget
of %d prototype episodes in all: spend it on the failures you want to fix and on checking that what
passed still passes. Try every candidate before you write it to new/.

`, p.Episodes)
	}
	fmt.Fprintf(&b, `## Rules

%s
## Where to write

For each new candidate write
  new/<name>/harness.star   the complete harness (not a diff)
  new/<name>/meta.json      {"name": "<name>", "hypothesis": "<one sentence>", "axis": "<axis>"}
with <name> short kebab-case (letters, digits, dashes). Write at most %d candidates; anything outside
new/ is ignored. You may run `+"`whale harness check <file> --domain %s`"+` if it is on PATH.
`, rules(in.cfg, in.contract.Name), in.cfg.M, in.contract.Name)
	return b.String()
}

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

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/stages"
)

// DefaultAgentTimeout bounds an agent run when Stage.AgentTimeout is 0.
const DefaultAgentTimeout = time.Hour

// agentLogBytes is how much of the agent's output the stage keeps (the
// tail) in agent.log.
const agentLogBytes = 256 << 10

// agentTraceBytes bounds each trace file of the workspace.
const agentTraceBytes = 20000

// checkAgent checks the agent backend's settings.
func (c Config) checkAgent() []error {
	if strings.TrimSpace(c.AgentCommand) == "" {
		return []error{errors.New("agent_command is empty: the agent backend runs it in the workspace")}
	}
	return nil
}

// agent is the agent backend: it writes the workspace, runs the agent
// command in it and harvests new/*/.
func (s *Stage) agent(ctx context.Context, x *stages.Exec, in *input) (outcome, error) {
	root, err := os.MkdirTemp(s.WorkDir, "whale-propose-")
	if err != nil {
		return outcome{}, fmt.Errorf("propose: agent workspace: %w", err)
	}
	if s.KeepWorkspace {
		in.log.Info("agent workspace kept", "dir", root)
	} else {
		defer os.RemoveAll(root)
	}
	ws := filepath.Join(root, "workspace")
	if err := writeWorkspace(ws, in); err != nil {
		return outcome{}, fmt.Errorf("propose: agent workspace %s: %w", ws, err)
	}

	timeout := s.AgentTimeout
	if timeout <= 0 {
		timeout = DefaultAgentTimeout
	}
	logPath := filepath.Join(root, "agent.log")
	status, err := runAgent(ctx, in, ws, logPath, timeout)
	if err != nil {
		return outcome{}, err
	}
	in.log.Info("agent finished", "status", status)
	if err := uploadLog(ctx, x, logPath); err != nil {
		return outcome{}, err
	}

	out, err := harvest(ws, in.cfg.M)
	if err != nil {
		return outcome{}, err
	}
	if len(out.proposals) == 0 && len(out.rejected) == 0 {
		out.rejected = append(out.rejected, Rejection{Name: "agent", Kind: RejectAgentQuiet,
			Reason: fmt.Sprintf("agent wrote nothing (agent %s)", status)})
	}
	out.summary = map[string]any{"agent_status": status}
	return out, nil
}

// runAgent runs the command and says how it ended: "exited 0", "exited
// 3", "timed out after 1h0m0s". Only a command that could not start at
// all, or a cancelled stage, is an error.
func runAgent(ctx context.Context, in *input, ws, logPath string, timeout time.Duration) (string, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return "", fmt.Errorf("propose: agent log: %w", err)
	}
	defer logf.Close()

	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(actx, "/bin/sh", "-c", in.cfg.AgentCommand)
	cmd.Dir = ws
	promptOnly := "0"
	if in.cfg.PromptOnly {
		promptOnly = "1"
	}
	cmd.Env = append(os.Environ(),
		"WHALE_WORKSPACE="+ws,
		"WHALE_CANDIDATES="+strconv.Itoa(in.cfg.M),
		"WHALE_PROMPT_ONLY="+promptOnly,
		"WHALE_DOMAIN="+in.cfg.Domain,
		"WHALE_PARENT="+in.parent.ID(),
		"WHALE_ITERATION="+strconv.Itoa(in.cfg.Iteration),
	)
	// Writing to a file (not a pipe) means Wait never waits on a grandchild
	// that keeps the agent's output open.
	cmd.Stdout, cmd.Stderr = logf, logf
	// The agent gets its own process group so that a timeout ends
	// everything it started, not just the shell.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var hardKill *time.Timer
	cmd.Cancel = func() error {
		killGroup(cmd.Process.Pid, syscall.SIGTERM)
		hardKill = time.AfterFunc(2*time.Second, func() { killGroup(cmd.Process.Pid, syscall.SIGKILL) })
		return nil
	}
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("propose: start agent command: %w", err)
	}
	err = cmd.Wait()
	if hardKill != nil {
		hardKill.Stop()
	}
	// Whatever the agent left running in its group goes with it.
	killGroup(cmd.Process.Pid, syscall.SIGKILL)
	switch {
	case ctx.Err() != nil:
		return "", fmt.Errorf("propose: agent: %w", ctx.Err())
	case actx.Err() != nil:
		return fmt.Sprintf("timed out after %s", timeout), nil
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

// uploadLog keeps the tail of the agent's output as agent.log.
func uploadLog(ctx context.Context, x *stages.Exec, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("propose: agent log: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > agentLogBytes {
		if _, err := f.Seek(st.Size()-agentLogBytes, io.SeekStart); err != nil {
			return fmt.Errorf("propose: agent log: %w", err)
		}
	}
	w, err := x.Create(ctx, "agent.log")
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, f); err != nil {
		w.Abort()
		return fmt.Errorf("propose: agent log: %w", err)
	}
	return w.Close()
}

// meta is new/<name>/meta.json.
type meta struct {
	Name       string `json:"name"`
	Hypothesis string `json:"hypothesis"`
	Axis       string `json:"axis"`
}

// harvest reads new/*/harness.star and meta.json, in name order. Only
// regular files are read (a link could point anywhere on this machine).
func harvest(ws string, m int) (outcome, error) {
	var out outcome
	dir := filepath.Join(ws, "new")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("propose: harvest %s: %w", dir, err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		rel := "new/" + e.Name()
		src, err := readRegular(filepath.Join(dir, e.Name(), "harness.star"), harness.MaxSourceBytes)
		if err != nil {
			out.rejected = append(out.rejected, Rejection{Name: e.Name(), Kind: RejectProposalBad, Reason: rel + ": " + err.Error()})
			continue
		}
		p := proposal{Name: e.Name(), Source: src}
		if data, err := readRegular(filepath.Join(dir, e.Name(), "meta.json"), 64<<10); err == nil {
			var md meta
			if err := json.Unmarshal(data, &md); err != nil {
				out.rejected = append(out.rejected, Rejection{Name: e.Name(), Kind: RejectProposalBad,
					Reason: rel + "/meta.json: " + err.Error() + ` (want {"name", "hypothesis", "axis"})`, Source: string(src)})
				continue
			}
			p.Name = cmpOr(md.Name, p.Name)
			p.Hypothesis, p.Axis = md.Hypothesis, md.Axis
		}
		if len(out.proposals) == m {
			out.rejected = append(out.rejected, Rejection{Name: p.Name, Axis: p.Axis, Kind: RejectOverLimit,
				Reason: fmt.Sprintf("%s: more than m = %d candidates written", rel, m), Source: string(src)})
			continue
		}
		out.proposals = append(out.proposals, p)
	}
	return out, nil
}

func cmpOr(a, b string) string {
	if strings.TrimSpace(a) != "" {
		return a
	}
	return b
}

// readRegular reads a regular file of at most limit bytes.
func readRegular(path string, limit int64) ([]byte, error) {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no %s", filepath.Base(path))
	}
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", filepath.Base(path))
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than the limit of %d", filepath.Base(path), st.Size(), limit)
	}
	return os.ReadFile(path)
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

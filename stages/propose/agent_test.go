package propose

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages/internal/play"
	"github.com/whalerun/whale/storage"
)

// agentConfig runs testdata/script as the agent, with args. The script's
// text is in the command itself: the agent's sandbox hides the system's
// temporary folders, where a checkout (CI's) may lie.
func agentConfig(t *testing.T, m int, script string, args ...string) Config {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("testdata", script))
	if err != nil {
		t.Fatal(err)
	}
	cmd := "sh -c '" + strings.ReplaceAll(string(text), "'", `'\''`) + "' " + script
	for _, a := range args {
		cmd += " " + a
	}
	return Config{Backend: BackendAgent, M: m, Parent: ParentH0, Iteration: 1, Domain: "fake", AgentCommand: cmd}
}

func TestStageAgent(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		tasks := commitTasks(t, s)
		eval := commit(t, s, "r001-h01", evaluateFixture(map[string]int{h0ID: 1}), "archive-0")
		st := &Stage{Domain: &fakeDomain{}, WorkDir: agentWorkDir(t), AgentTimeout: time.Minute}
		m, cands, rej := runStage(t, s, st, agentConfig(t, 3, "fake-agent-writes.sh"), 1, tasks, eval)
		log := readFile(t, s, m, "agent")
		if names(cands) != "more-turns" {
			t.Fatalf("valid %s, rejected %+v\nagent log:\n%s", names(cands), rej, log)
		}
		c := cands[0]
		if c.Axis != "turns" || c.Hypothesis != "six turns leave room to search twice" || c.Proposer != "agent" || c.ParentID != h0ID {
			t.Fatalf("candidate %+v", c)
		}
		if kinds(rej) != "bad_proposal,invalid" {
			t.Fatalf("rejected %+v", rej)
		}
		if !strings.Contains(rej[0].Reason, "not a regular file") || rej[0].Source != "" {
			t.Errorf("link: %+v", rej[0])
		}
		if !strings.Contains(rej[1].Reason, "broken.star:2:1") {
			t.Errorf("broken: %q", rej[1].Reason)
		}
		if !strings.Contains(log, "fake agent wrote 3 candidates") || !strings.HasPrefix(m.Summary["agent_status"].(string), "exited 0") {
			t.Errorf("log %q, summary %v", log, m.Summary)
		}
		// The workspace is gone.
		if left, _ := os.ReadDir(st.WorkDir); len(left) != 0 {
			t.Errorf("workspace left behind: %v", left)
		}
	})
}

// The scripted agent reads its parent's trajectories, prototypes a
// candidate with ./try against the run's model (a fake vLLM here),
// within the stage's budget and on search-set tasks only, and finds no
// bucket credentials in its environment.
func TestStageAgentPrototypesFakeVLLM(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		// The S3 root's own credentials are in whale's environment
		// (s3test sets them); the other roots get one to hide.
		if s.Scheme() != "s3" {
			t.Setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-proto-0123456789")
		}
		awsSecret := os.Getenv("AWS_SECRET_ACCESS_KEY")
		if len(awsSecret) < 8 {
			t.Fatalf("AWS_SECRET_ACCESS_KEY %q: want a secret to hide", awsSecret)
		}
		rows := append(slices.Clone(testTasks), schemas.Task{ID: "x9", Domain: "fake", Split: "test", Question: "a test question", Answers: []string{"t"}, Meta: "{}"})
		tasks := commit(t, s, "tasks", &fixture{name: "tasks", files: map[string]func(io.Writer) (int64, error){
			"tasks.parquet": parquetOf(schemas.Tasks, rows),
		}}, "tasks")
		eval := commit(t, s, "r001-h01", evaluateFixture(map[string]int{h0ID: 1}), "archive-0")
		srv := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: "<answer>Paris</answer>"}))
		model, err := models.New(models.Config{Endpoints: []string{srv.URL}, Model: "target", Retry: models.RetryPolicy{Attempts: 1}, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		st := &Stage{Domain: &fakeDomain{}, Model: model, WorkDir: agentWorkDir(t), AgentTimeout: 2 * time.Minute}
		if s.Scheme() == "file" {
			st.RootDir = StoreDir(s)
		}
		cfg := agentConfig(t, 2, "fake-agent-prototype.sh")
		temp := 0.7
		cfg.Prototype = &Prototype{ModelName: "target", Episodes: 3, Sampling: play.Sampling{Temperature: &temp}}
		m, cands, rej := runStage(t, s, st, cfg, 1, tasks, eval)
		log := readFile(t, s, m, "agent")
		if !strings.HasPrefix(m.Summary["agent_status"].(string), "exited 0") || names(cands) != "more-turns" || len(rej) != 0 {
			t.Fatalf("agent %v, candidates %s, rejected %+v; log:\n%s", m.Summary["agent_status"], names(cands), rej, log)
		}
		for _, want := range []string{
			"AWS_SECRET_ACCESS_KEY absent", "trajectories: 3 episodes", "failed task: t2",
			"task t1  reward 1  correct true", "task t2  reward 0", "budget: 2 of 3 episodes used",
			"the harness does not load (nothing played, nothing spent)",
			"task x9 is of the test split", "no task nope in the search set",
			"1 task(s) not played: the stage's budget of 3 prototype episodes is spent (t1)", "budget: 3 of 3 episodes used",
			"fake agent done",
		} {
			if !strings.Contains(log, want) {
				t.Errorf("agent.log lacks %q:\n%s", want, log)
			}
		}
		if strings.Contains(log, awsSecret) {
			t.Error("agent.log holds the AWS secret")
		}
		if m.Summary["prototype_episodes"] != 3.0 || m.Summary["prototype_requests"] != 5.0 {
			t.Errorf("summary %v", m.Summary)
		}
		// Three episodes, one call each, with the run's model and decoding.
		reqs := srv.Requests()
		if len(reqs) != 3 {
			t.Fatalf("%d model calls, want 3", len(reqs))
		}
		for _, r := range reqs {
			if r.Model != "target" || r.Body["temperature"] != 0.7 || !strings.Contains(r.Messages[len(r.Messages)-1].Content, "Question: ") {
				t.Errorf("prototype call: model %s, body %v", r.Model, r.Body)
			}
			if strings.Contains(string(r.Raw), "a test question") {
				t.Error("a test question reached the model")
			}
		}
	})
}

func TestStageAgentWritesNothing(t *testing.T) {
	s := openStore(t, "mem://")
	tasks := commitTasks(t, s)
	st := &Stage{Domain: &fakeDomain{}, WorkDir: agentWorkDir(t)}
	m, cands, rej := runStage(t, s, st, agentConfig(t, 2, "fake-agent-silent.sh"), 1, tasks)
	if len(cands) != 0 || len(rej) != 1 || rej[0].Kind != RejectAgentQuiet || !strings.Contains(rej[0].Reason, "agent wrote nothing") {
		t.Fatalf("candidates %s, rejected %+v", names(cands), rej)
	}
	if m.Summary["valid"] != 0.0 || m.Summary["proposed"] != 1.0 {
		t.Fatalf("summary %v", m.Summary)
	}
}

func TestStageAgentTimeout(t *testing.T) {
	s := openStore(t, "mem://")
	tasks := commitTasks(t, s)
	// The agent's background child carries the marker on its command
	// line: under bwrap its pid is one of the sandbox's, so the test
	// looks for it among the machine's processes while the agent runs.
	marker := fmt.Sprintf("whale-test-child-%d-%d", os.Getpid(), time.Now().UnixNano())
	found := make(chan int, 1)
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if pid := findProcess(marker); pid > 0 {
				found <- pid
				return
			}
		}
	}()
	st := &Stage{Domain: &fakeDomain{}, WorkDir: agentWorkDir(t), AgentTimeout: 2 * time.Second}
	start := time.Now()
	_, cands, rej := runStage(t, s, st, agentConfig(t, 2, "fake-agent-hangs.sh", marker), 1, tasks)
	close(stop)
	if took := time.Since(start); took > 20*time.Second {
		t.Fatalf("the stage took %s with a 2s agent timeout", took)
	}
	if len(cands) != 0 || len(rej) != 1 || !strings.Contains(rej[0].Reason, "timed out after 2s") {
		t.Fatalf("candidates %s, rejected %+v", names(cands), rej)
	}
	var pid int
	select {
	case pid = <-found:
	default:
		t.Fatal("the agent's background child was never seen running")
	}
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent's background child %d outlived the timeout", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// findProcess returns the pid of a process whose command line holds
// marker as one argument, 0 if none.
func findProcess(marker string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && slices.Contains(strings.Split(string(b), "\x00"), marker) {
			return pid
		}
	}
	return 0
}

// alive reports whether pid runs (a zombie waiting for its reaper does not).
func alive(pid int) bool {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}

func TestWriteWorkspace(t *testing.T) {
	dom := &fakeDomain{}
	in := mutateInput(t, dom, 1, 1, 2, true)
	a := in.arch
	cand := withLine(t, fakeBaseline, "TOPK = 3", "TOPK = 5")
	cid := harness.SourceID([]byte(cand))
	a.h0 = h0ID
	a.order = []string{h0ID, cid}
	a.sources[h0ID] = archived{Candidate: schemas.Candidate{HarnessID: h0ID, Name: "h0", Source: fakeBaseline, Axis: "baseline"}}
	a.sources[cid] = archived{Candidate: schemas.Candidate{HarnessID: cid, ParentID: h0ID, Name: "topk-5", Axis: "retrieval", Hypothesis: "more passages help", Source: cand}, Position: "r001-h02"}
	a.scores[h0ID] = &score{tasks: 2, sumReward: 1, sumTurns: 4}
	a.scores[cid] = &score{tasks: 2, sumReward: 2, sumTurns: 6}
	a.markFrontier()

	ws := filepath.Join(t.TempDir(), "ws")
	if err := writeWorkspace(ws, in, candidateDirs(a, in.parent.ID(), string(in.parent.Source()))); err != nil {
		t.Fatal(err)
	}
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(ws, p))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	h0dir := "candidates/h0-" + strings.TrimPrefix(h0ID, "sha256:")[:8]
	cdir := "candidates/topk-5-" + strings.TrimPrefix(cid, "sha256:")[:8]
	if read(h0dir+"/harness.star") != fakeBaseline || read(cdir+"/harness.star") != cand {
		t.Fatal("sources differ")
	}
	var front struct {
		Candidates []struct {
			HarnessID  string   `json:"harness_id"`
			Success    *float64 `json:"success"`
			OnFrontier bool     `json:"on_frontier"`
			Winner     bool     `json:"winner"`
			Parent     bool     `json:"is_parent"`
		} `json:"candidates"`
	}
	if err := json.Unmarshal([]byte(read("frontier.json")), &front); err != nil {
		t.Fatal(err)
	}
	// topk-5 solves more, h0 takes fewer turns: both on the frontier,
	// topk-5 best and listed first.
	fc := front.Candidates
	if len(fc) != 2 || fc[0].HarnessID != cid || !fc[0].Winner || !fc[0].OnFrontier || !fc[1].OnFrontier || !fc[1].Parent || *fc[0].Success != 1 {
		t.Fatalf("frontier.json %+v", fc)
	}
	var sc map[string]any
	if err := json.Unmarshal([]byte(read(cdir+"/scores.json")), &sc); err != nil || sc["success"] != 1.0 || sc["mean_turns"] != 3.0 || sc["axis"] != "retrieval" {
		t.Fatalf("scores.json %v %v", sc, err)
	}
	if log := read("evolution_log.md"); !strings.Contains(log, "more passages help") || !strings.Contains(log, "r001-h02") || !strings.Contains(log, "**parent**") {
		t.Fatalf("evolution log:\n%s", log)
	}
	skill := read("SKILL.md")
	for _, want := range []string{"PROMPT-ONLY", "new/<name>/meta.json", "exactly ONE mechanism", h0dir[len("candidates/"):], "may NOT change the model"} {
		if !strings.Contains(skill, want) {
			t.Errorf("SKILL.md lacks %q", want)
		}
	}
	if !strings.Contains(read("CONTRACT.md"), "TOPK") {
		t.Error("CONTRACT.md lacks the domain constant")
	}
	if fi, err := os.Stat(filepath.Join(ws, "new")); err != nil || !fi.IsDir() {
		t.Fatal("no new/ folder")
	}
	if _, err := os.Stat(filepath.Join(ws, "try")); !os.IsNotExist(err) || strings.Contains(skill, "./try") {
		t.Errorf("./try without a prototype budget: %v", err)
	}

	// With a prototype budget: ./try, its request folder, and the skill says so.
	in.cfg.Prototype = &Prototype{ModelName: "target", Episodes: 12}
	ws = filepath.Join(t.TempDir(), "ws")
	if err := writeWorkspace(ws, in, candidateDirs(a, in.parent.ID(), string(in.parent.Source()))); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(ws, "try")); err != nil || fi.Mode().Perm()&0o111 == 0 {
		t.Fatalf("./try: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(ws, "prototype", "requests")); err != nil || !fi.IsDir() {
		t.Fatalf("prototype/requests: %v", err)
	}
	if skill := read("SKILL.md"); !strings.Contains(skill, "./try HARNESS_FILE TASK_ID") || !strings.Contains(skill, "budget\nof 12 prototype episodes") {
		t.Errorf("SKILL.md:\n%s", skill)
	}
}

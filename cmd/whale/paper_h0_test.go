package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whalerun/whale/domains/chess"
	mathdomain "github.com/whalerun/whale/domains/math"
	"github.com/whalerun/whale/domains/registry"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/harness/archive"
	"github.com/whalerun/whale/importers"
	"github.com/whalerun/whale/jobs/trainers"
	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/pipeline/ledger"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/storage"
)

// The paper's experiment in small, per domain and root, end to end through
// the command line (data import and split, index build, init, run): the
// domain's shipped h0, schedule whale with both phases (RSFT steps, the
// mutate proposer, test evaluations), a scripted model that answers with
// native tool calls, the reference trainer's data path on the toy model
// (jobs/trainers/testdata/toy_trainer.py, CPU) and each checkpoint handed
// to a FAKE vLLM: restarted under the step's model id by a reload command,
// or reloaded in place through vLLM's /collective_rpc reload_weights.
//
// The schedule, with a train set of one batch (one weight step a phase)
// and a budget of two weight steps, is
var paperSteps = []string{
	"r001-w01-rollout", "r001-w01-filter", "r001-w01-finetune",
	"r001-wt-evaluate",
	"r001-h01-evaluate",
	"r001-h02-propose", "r001-h02-evaluate",
	"r001-ht-evaluate",
	"r002-w01-rollout", "r002-w01-filter", "r002-w01-finetune",
	"r002-wt-evaluate",
}

// paperModel is the model name of the experiments and the name the FAKE
// vLLM serves before any hand-off.
const paperModel = "fake-model"

// paperScript is how the scripted model plays one domain: it finds the
// task in the request, and whether this episode is one it gets right
// (paperCoin), and answers as a model with native tools would.
type paperScript interface {
	reply(req *modeltest.Request) (modeltest.Reply, error)
	// expect is the reward and the turns the script implies for task's
	// episode with seed under a harness with constants consts.
	expect(task schemas.Task, seed int64, consts map[string]any) (float64, int32)
}

// paperCoin is the scripted model's coin for an episode: right on about
// three episodes in four, so that every weight step has accepted
// rollouts to train on, except on task never: a search-set task it never
// gets right, so that no harness scores 1.0 on the search set (a perfect
// score ends the harness phase before the proposer runs).
type paperCoin struct{ never string }

func (c paperCoin) right(taskID string, seed int64) bool {
	h := sha256.Sum256([]byte(taskID + "/" + strconv.FormatInt(seed, 10)))
	return taskID != c.never && h[0]%4 != 0
}

// episodeSeed is the seed of the episode a request belongs to: the loop
// sends the episode's seed plus the turns before this call, and every
// earlier turn is an assistant message of the request.
func episodeSeed(req *modeltest.Request) (int64, error) {
	s, ok := req.Body["seed"].(float64)
	if !ok {
		return 0, fmt.Errorf("request %d has no seed", req.Call)
	}
	n := 0
	for _, m := range req.Messages {
		if m.Role == "assistant" {
			n++
		}
	}
	return int64(s) - int64(n), nil
}

// findByQuestion is the task whose question a user message holds.
func findByQuestion(tasks []schemas.Task, msgs []schemas.Message) (schemas.Task, error) {
	for _, m := range msgs {
		if m.Role != "user" {
			continue
		}
		for _, task := range tasks {
			if strings.Contains(m.Content, task.Question) {
				return task, nil
			}
		}
	}
	return schemas.Task{}, errors.New("no known question in the user messages")
}

func maxTurns(consts map[string]any) int64 {
	n, _ := consts["MAX_TURNS"].(int64)
	return n
}

// searchScript searches for the question, then answers from the passage:
// the gold answer, or a wrong one.
type searchScript struct {
	tasks []schemas.Task
	coin  paperCoin
}

func (s searchScript) reply(req *modeltest.Request) (modeltest.Reply, error) {
	task, err := findByQuestion(s.tasks, req.Messages)
	if err != nil {
		return modeltest.Reply{}, err
	}
	seed, err := episodeSeed(req)
	if err != nil {
		return modeltest.Reply{}, err
	}
	switch last := req.Messages[len(req.Messages)-1]; last.Role {
	case "user":
		args, _ := json.Marshal(map[string]any{"query_list": []string{task.Question}})
		return modeltest.Reply{Reasoning: "I should look this up.",
			ToolCalls: []modeltest.ToolCall{{ID: fmt.Sprintf("call-%d", req.Call), Name: "search", Arguments: string(args)}}}, nil
	case "tool":
		if !strings.Contains(last.Content, "Doc 1(Title: ") {
			return modeltest.Reply{}, fmt.Errorf("the search result has no passage: %q", last.Content)
		}
		answer := "nobody knows"
		if s.coin.right(task.ID, seed) {
			answer = task.Answers[0]
		}
		return modeltest.Reply{Reasoning: "The passage says so.", Content: "<answer>" + answer + "</answer>"}, nil
	default:
		return modeltest.Reply{}, fmt.Errorf("a call after a %s message", last.Role)
	}
}

// One search, then the answer: two turns (one, the search, when the
// harness allows only one).
func (s searchScript) expect(task schemas.Task, seed int64, consts map[string]any) (float64, int32) {
	return twoTurns(s.coin.right(task.ID, seed), consts)
}

func twoTurns(right bool, consts map[string]any) (float64, int32) {
	if maxTurns(consts) < 2 {
		return 0, 1
	}
	if right {
		return 1, 2
	}
	return 0, 2
}

// mathScript prints the answer (or one more) with code_interpreter, then
// boxes what the sandbox printed: the reward depends on the program
// really running.
type mathScript struct {
	tasks []schemas.Task
	coin  paperCoin
}

var printed = regexp.MustCompile(`^\s*(-?\d+)\s*$`)

func (s mathScript) reply(req *modeltest.Request) (modeltest.Reply, error) {
	task, err := findByQuestion(s.tasks, req.Messages)
	if err != nil {
		return modeltest.Reply{}, err
	}
	seed, err := episodeSeed(req)
	if err != nil {
		return modeltest.Reply{}, err
	}
	switch last := req.Messages[len(req.Messages)-1]; last.Role {
	case "user":
		code := "print(" + task.Answers[0] + ")"
		if !s.coin.right(task.ID, seed) {
			code = "print(" + task.Answers[0] + " + 1)"
		}
		args, _ := json.Marshal(map[string]any{"code": code})
		return modeltest.Reply{Reasoning: "Let me compute it.",
			ToolCalls: []modeltest.ToolCall{{ID: fmt.Sprintf("call-%d", req.Call), Name: "code_interpreter", Arguments: string(args)}}}, nil
	case "tool":
		m := printed.FindStringSubmatch(last.Content)
		if m == nil {
			return modeltest.Reply{}, fmt.Errorf("the program's output %q is not a number", last.Content)
		}
		return modeltest.Reply{Reasoning: "The program printed it.", Content: `So the answer is \boxed{` + m[1] + `}.`}, nil
	default:
		return modeltest.Reply{}, fmt.Errorf("a call after a %s message", last.Role)
	}
}

func (s mathScript) expect(task schemas.Task, seed int64, consts map[string]any) (float64, int32) {
	return twoTurns(s.coin.right(task.ID, seed), consts)
}

// chessScript plays the solution's move for the position it is shown or,
// in an episode it gets wrong, an illegal move every time (the retry
// budget runs out).
type chessScript struct {
	coin  paperCoin
	byFEN map[string]chessMove
	steps map[string]int // task id → solver moves
}

type chessMove struct {
	task              schemas.Task
	solution, illegal string
}

func newChessScript(t *testing.T, tasks []schemas.Task, coin paperCoin) chessScript {
	t.Helper()
	s := chessScript{coin: coin, byFEN: map[string]chessMove{}, steps: map[string]int{}}
	for _, task := range tasks {
		var meta importers.LichessMeta
		if err := json.Unmarshal([]byte(task.Meta), &meta); err != nil {
			t.Fatalf("puzzle %s: meta: %v", task.ID, err)
		}
		z, err := chess.FromTask(task)
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i < len(meta.Moves); i += 2 {
			mv := chessMove{task: task, solution: meta.Moves[i], illegal: illegalMove(z.LegalMovesUCI())}
			if _, dup := s.byFEN[z.FEN()]; dup {
				t.Fatalf("puzzle %s: position %s seen twice", task.ID, z.FEN())
			}
			s.byFEN[z.FEN()] = mv
			s.steps[task.ID]++
			if out, err := z.Play(mv.solution); err != nil || !out.Correct {
				t.Fatalf("puzzle %s: the solution's %s: %+v %v", task.ID, mv.solution, out, err)
			}
		}
	}
	return s
}

// illegalMove is a move in UCI that no piece can make here.
func illegalMove(legal []string) string {
	for from := range 64 {
		for to := range 64 {
			mv := fmt.Sprintf("%c%d%c%d", 'a'+from%8, 1+from/8, 'a'+to%8, 1+to/8)
			if from != to && !slices.Contains(legal, mv) {
				return mv
			}
		}
	}
	panic("every move is legal")
}

func (s chessScript) reply(req *modeltest.Request) (modeltest.Reply, error) {
	seed, err := episodeSeed(req)
	if err != nil {
		return modeltest.Reply{}, err
	}
	// The last observation: retry feedback comes after it without a board.
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role != "user" {
			continue
		}
		for line := range strings.Lines(req.Messages[i].Content) {
			fen, ok := strings.CutPrefix(strings.TrimSpace(line), "FEN: ")
			if !ok {
				continue
			}
			mv, ok := s.byFEN[fen]
			if !ok {
				return modeltest.Reply{}, fmt.Errorf("unknown position %s", fen)
			}
			if s.coin.right(mv.task.ID, seed) {
				return modeltest.Reply{Content: "<move>" + mv.solution + "</move>"}, nil
			}
			return modeltest.Reply{Content: "<move>" + mv.illegal + "</move>"}, nil
		}
	}
	return modeltest.Reply{}, errors.New("no FEN in the user messages")
}

// Reward only for the whole line, one turn a move; an illegal move is
// tried again ILLEGAL_RETRIES times, then the puzzle is lost.
func (s chessScript) expect(task schemas.Task, seed int64, consts map[string]any) (float64, int32) {
	limit := maxTurns(consts)
	if s.coin.right(task.ID, seed) {
		if n := int64(s.steps[task.ID]); n <= limit {
			return 1, int32(n)
		}
		return 0, int32(limit)
	}
	retries, _ := consts["ILLEGAL_RETRIES"].(int64)
	return 0, int32(min(1+retries, limit))
}

// paperDomain is what a domain's run needs: its shipped tasks, how many
// go to train, search and test, its tools and the native tool h0 offers.
type paperDomain struct {
	name   string
	file   string
	format importers.Format
	counts [3]int
	// tools is the experiment's tools block; tool the native tool's name
	// ("" for chess, which has none).
	tools, tool string
	script      func(t *testing.T, tasks []schemas.Task, coin paperCoin) paperScript
}

var paperDomains = map[string]paperDomain{
	"searchqa": {name: "searchqa", file: "../../domains/searchqa/testdata/questions.jsonl", format: importers.FormatJSONL,
		counts: [3]int{2, 2, 2}, tools: "{retriever: 'index:wiki-paper'}", tool: "search",
		script: func(_ *testing.T, tasks []schemas.Task, coin paperCoin) paperScript { return searchScript{tasks, coin} }},
	"math": {name: "math", file: "../../domains/math/testdata/problems.jsonl", format: importers.FormatJSONL,
		counts: [3]int{2, 2, 2}, tools: "{sandbox: local}", tool: "code_interpreter",
		script: func(_ *testing.T, tasks []schemas.Task, coin paperCoin) paperScript { return mathScript{tasks, coin} }},
	"chess": {name: "chess", file: "../../domains/chess/testdata/puzzles_extra.csv", format: importers.FormatLichess,
		counts: [3]int{2, 2, 1}, tools: "{}",
		script: func(t *testing.T, tasks []schemas.Task, coin paperCoin) paperScript {
			return newChessScript(t, tasks, coin)
		}},
}

// TestPaperH0WholeRunFakeVLLM runs each domain's paper h0 through a whole
// small WHALE run on file:// and S3 roots, with each reload mode on each
// domain. Every planned stage commits; every call of a stage after a
// finetune asks for that finetune's model (its id after a restart; the
// served name, with the new weights loaded, after an in-place reload);
// every row records the id; search QA and math calls offer their native
// tool; every reward is the one the script implies.
func TestPaperH0WholeRunFakeVLLM(t *testing.T) {
	py := toyTrainerPython(t)
	cases := []struct{ domain, root, reload string }{
		{"searchqa", "file", "command"},
		{"searchqa", "s3", "vllm-weights"},
		{"math", "file", "vllm-weights"},
		{"math", "s3", "command"},
		{"chess", "file", "command"},
		{"chess", "s3", "vllm-weights"},
	}
	for _, c := range cases {
		t.Run(c.domain+"/"+c.root+"/"+c.reload, func(t *testing.T) {
			root := fileRoot(t)
			if c.root == "s3" {
				root = s3Root(t)
			}
			paperRun(t, paperDomains[c.domain], root, c.reload, py)
		})
	}
}

// paperCall is one chat call the scripted model answered: when, the
// model it asked for, the weights the FAKE vLLM held then, and the tools
// it offered.
type paperCall struct {
	at      time.Time
	model   string
	weights string
	tools   []string
}

func paperRun(t *testing.T, d paperDomain, root testRoot, reload, py string) {
	if d.name == "math" {
		needLocalSandbox(t)
	}
	ctx := context.Background()
	var tasks []schemas.Task
	if err := importers.ImportFile(ctx, d.file, d.format, importers.Options{Domain: d.name}, func(task schemas.Task) error {
		tasks = append(tasks, task)
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// The data as a user prepares it: one import, split by hash.
	all := d.name + "-all"
	whale(t, "data", "import", "--root", root.url, "--domain", d.name, "--name", all, d.file).mustCode(t, exitOK)
	whale(t, "data", "split", all, "--root", root.url, "--seed", "1",
		"--train", strconv.Itoa(d.counts[0]), "--search", strconv.Itoa(d.counts[1]), "--test", strconv.Itoa(d.counts[2])).mustCode(t, exitOK)
	store := openStore(t, root.url)
	search, err := storage.ReadDataset(ctx, store, all+"-search")
	if err != nil {
		t.Fatal(err)
	}
	script := d.script(t, tasks, paperCoin{never: readTable[schemas.Task](t, store, search, "tasks")[0].ID})
	if d.name == "searchqa" {
		whale(t, "index", "build", searchCorpus, "--name", "wiki-paper", "--root", root.url).mustCode(t, exitOK)
	}

	// The FAKE vLLM: started on the base as model.name; dev mode (the
	// control endpoints of reload_weights) only where the run uses them.
	var (
		mu        sync.Mutex
		vllm      *modeltest.VLLM
		calls     []paperCall
		surprises []string
	)
	srv := modeltest.NewServer(t, func(req *modeltest.Request) modeltest.Reply {
		mu.Lock()
		c := paperCall{at: time.Now(), model: req.Model, weights: vllm.Weights()}
		mu.Unlock()
		for _, tool := range req.Tools {
			c.tools = append(c.tools, tool.Name)
		}
		rep, err := script.reply(req)
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, c)
		if err != nil {
			surprises = append(surprises, fmt.Sprintf("call %d: %v", req.Call, err))
			return modeltest.Reply{Content: "?"}
		}
		return rep
	})
	mu.Lock()
	vllm = srv.VLLM(modeltest.VLLMOptions{Served: paperModel, Weights: "/models/toy-base", DevMode: reload == "vllm-weights"})
	mu.Unlock()
	reloadLine := "reload: vllm-weights"
	if reload == "command" {
		// A restart of the FAKE vLLM on the checkpoint under
		// $WHALE_MODEL_ID, as jobs/vllm/reload.sh does to real servers
		// (jobs/vllm tests that script): it refuses, as vLLM does at
		// start, a directory that is not a Hugging Face checkpoint.
		ctl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, dir := r.URL.Query().Get("model"), r.URL.Query().Get("dir")
			if err := hfCheckpoint(dir); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			mu.Lock()
			vllm = srv.VLLM(modeltest.VLLMOptions{Served: id, Weights: dir})
			mu.Unlock()
		}))
		t.Cleanup(ctl.Close)
		reloadLine = fmt.Sprintf("reload: command\n  reload_command: %q", fmt.Sprintf(
			`curl -fsS -G %s --data-urlencode "model=$WHALE_MODEL_ID" --data-urlencode "dir=$WHALE_CHECKPOINT_DIR"`, ctl.URL))
	}

	trainer, err := filepath.Abs("../../jobs/trainers/testdata/toy_trainer.py")
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := filepath.Abs("../../jobs/trainers/testdata/qwen3_like.jinja")
	if err != nil {
		t.Fatal(err)
	}
	run := "paper-" + d.name
	exp := writeFile(t, run+".yaml", fmt.Sprintf(`name: %s
domain: %s
schedule: whale
switch: {mode: fixed, fixed: {epochs: 1, iterations: 2}}
data: {train: datasets/%s-train, search: datasets/%s-search, test: datasets/%s-test}
model: {name: %s, checkpoint: toy/base, endpoints: [%q], concurrency: 4}
rsft: {group_size: 2, batch_size: %d}
harness: {initial: h0, proposer: mutate, candidates_per_iteration: 2, search_set_size: %d}
finetune:
  backend: command
  command: '"$PYTHON" "$TOY_TRAINER"'
  env: {PYTHON: %q, TOY_TRAINER: %q, WHALE_CHAT_TEMPLATE: %q, PYTHONDONTWRITEBYTECODE: "1"}
  %s
budget: {weight_steps: 2}
eval: {k: 2}
tools: %s
seed: 1
`, run, d.name, all, all, all, paperModel, srv.URL, d.counts[0], d.counts[1], py, trainer, tmpl, reloadLine, d.tools))
	whale(t, "init", "--root", root.url, exp).mustCode(t, exitOK)

	start := time.Now()
	res := whaleFor(t, 3*time.Minute, "run", "--root", root.url, "--cache", t.TempDir(), run)
	t.Logf("whale run %s (%s): %v", run, reload, time.Since(start).Round(time.Millisecond))
	res.mustCode(t, exitOK)
	mu.Lock()
	defer mu.Unlock()
	if len(surprises) > 0 {
		t.Fatalf("the scripted model was surprised:\n%s", strings.Join(surprises, "\n"))
	}
	// Every request reached the script: none asked for a model the FAKE
	// vLLM did not serve (it answers those 404).
	if n := len(srv.Requests()); n != len(calls) {
		t.Errorf("%d chat requests, %d answered by the script: some asked for a model not served", n, len(calls))
	}

	checkLedger(t, store, run)
	dom, err := registry.Lookup(d.name, registry.Resources{})
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]schemas.Task{}
	for _, task := range tasks {
		byID[task.ID] = task
	}
	consts := map[string]map[string]any{}
	constsOf := func(id string) map[string]any {
		if c, ok := consts[id]; ok {
			return c
		}
		src, err := archive.Get(ctx, store, id)
		if err != nil {
			t.Fatal(err)
		}
		h, err := harness.Load(id, src, harness.Options{Contract: dom.Contract()})
		if err != nil {
			t.Fatal(err)
		}
		consts[id] = h.Constants()
		return consts[id]
	}

	ms, err := storage.ListCommitted(ctx, store, run)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(ms, func(a, b *storage.Manifest) int { return a.Finished.Compare(b.Finished) })
	// The model every call of a stage must use: the base, then each
	// finetune's checkpoint.
	modelID, weights := paperModel, "/models/toy-base"
	used := 0
	var rewards [2]int
	var trainerSecs float64
	harnesses := map[string][]string{} // position → harness of each row
	var folders []string
	for _, m := range ms {
		folders = append(folders, m.Position+"-"+m.Stage)
		if m.Stage == "propose" {
			if n, _ := m.Summary["valid"].(float64); n != 2 {
				t.Errorf("%s: %v valid candidates, want 2 from the mutate proposer", m.Dir, m.Summary["valid"])
			}
		}
		if m.Stage == "finetune" {
			id, _ := m.Summary["model_id"].(string)
			if trained, _ := m.Summary["trained"].(bool); !trained || id == modelID {
				t.Fatalf("%s: trained %v, model id %q after %q: the step must train a new checkpoint", m.Dir, m.Summary["trained"], id, modelID)
			}
			if n, _ := m.Summary["reloaded"].(float64); n != 1 {
				t.Errorf("%s: reloaded %v servers, want 1", m.Dir, m.Summary["reloaded"])
			}
			secs, _ := m.Summary["trainer_seconds"].(float64)
			trainerSecs += secs
			modelID, weights = id, fmt.Sprintf("whale-finetune-%s-%s-a", run, m.Position)
			continue
		}
		if m.Stage != "rollout" && m.Stage != "evaluate" {
			continue
		}
		// The calls made while the stage ran.
		var mine []paperCall
		for _, c := range calls {
			if !c.at.Before(m.Started) && !c.at.After(m.Finished) {
				mine = append(mine, c)
			}
		}
		used += len(mine)
		if len(mine) == 0 {
			t.Errorf("%s: no chat call while it ran", m.Dir)
		}
		for _, c := range mine {
			want := modelID
			if reload == "vllm-weights" {
				want = paperModel // vLLM keeps --served-model-name
				if !strings.Contains(c.weights, weights) {
					t.Errorf("%s: a call answered by weights %q, want the checkpoint of %s", m.Dir, c.weights, weights)
				}
			}
			if c.model != want {
				t.Errorf("%s: a call asked for model %q, want %q", m.Dir, c.model, want)
			}
			if d.tool != "" && !slices.Equal(c.tools, []string{d.tool}) || d.tool == "" && len(c.tools) > 0 {
				t.Errorf("%s: a call offered tools %v, want [%s]", m.Dir, c.tools, d.tool)
			}
		}
		rows := readTable[schemas.Rollout](t, store, m, "rollouts")
		if len(rows) == 0 {
			t.Errorf("%s: no rollout rows", m.Dir)
		}
		for _, r := range rows {
			task, ok := byID[r.TaskID]
			if !ok {
				t.Fatalf("%s: row of unknown task %s", m.Dir, r.TaskID)
			}
			reward, turns := script.expect(task, r.Seed, constsOf(r.HarnessID))
			if r.ModelID != modelID || r.Error != "" || r.Reward != reward || r.Turns != turns {
				t.Errorf("%s: task %s sample %d seed %d: model %q reward %v turns %d error %q; want model %q reward %v turns %d",
					m.Dir, r.TaskID, r.Sample, r.Seed, r.ModelID, r.Reward, r.Turns, r.Error, modelID, reward, turns)
			}
			harnesses[m.Position] = append(harnesses[m.Position], r.HarnessID)
			if (d.tool != "") != strings.Contains(r.Tools, `"`+d.tool+`"`) || d.tool == "" && r.Tools != "" {
				t.Errorf("%s: task %s: row tools %q, want %q", m.Dir, r.TaskID, r.Tools, d.tool)
			}
			rewards[int(r.Reward)]++
		}
	}
	if !slices.Equal(folders, paperSteps) {
		t.Errorf("committed folders %v, want %v", folders, paperSteps)
	}
	// The proposer's candidates, not the incoming harness, were scored in
	// the second iteration.
	incoming := harnesses["r001-h01"]
	if len(incoming) == 0 || len(harnesses["r001-h02"]) == 0 {
		t.Fatalf("harnesses scored: %v", harnesses)
	}
	for _, id := range slices.Compact(slices.Sorted(slices.Values(harnesses["r001-h02"]))) {
		if id == incoming[0] {
			t.Errorf("r001-h02 scored the incoming harness %s again", id)
			continue
		}
		var edited []string
		for k, v := range constsOf(id) {
			if fmt.Sprint(v) != fmt.Sprint(constsOf(incoming[0])[k]) {
				edited = append(edited, k)
			}
		}
		slices.Sort(edited)
		t.Logf("candidate %s edits %v of h0", id[:15], edited)
	}
	if used != len(calls) {
		t.Errorf("%d of %d chat calls fall in no rollout or evaluate stage", len(calls)-used, len(calls))
	}
	if rewards[0] == 0 || rewards[1] == 0 {
		t.Errorf("rewards: %d of 0, %d of 1; the script gets some episodes wrong and most right", rewards[0], rewards[1])
	}
	t.Logf("%d chat calls; %d episodes rewarded 1, %d rewarded 0; the trainer ran %.1fs of the run", len(calls), rewards[1], rewards[0], trainerSecs)
}

// checkLedger: the run committed the schedule's stages in order, each
// after its decision, and ended.
func checkLedger(t *testing.T, s *storage.Store, run string) {
	t.Helper()
	entries, err := ledger.Read(context.Background(), s, run)
	if err != nil {
		t.Fatal(err)
	}
	var decided, committed []string
	done := 0
	for _, e := range entries {
		switch e.Kind {
		case ledger.KindDecision:
			decided = append(decided, e.Position+"-"+e.Stage)
		case ledger.KindStage:
			committed = append(committed, e.Position+"-"+e.Stage)
		case ledger.KindDone:
			done++
		}
	}
	if !slices.Equal(committed, paperSteps) || !slices.Equal(decided, paperSteps) || done != 1 {
		t.Fatalf("ledger: decided %v\ncommitted %v\n%d done; want %v and done once", decided, committed, done, paperSteps)
	}
}

// readTable reads the rows of a committed folder's table.
func readTable[T any](t *testing.T, s *storage.Store, m *storage.Manifest, table string) []T {
	t.Helper()
	ctx := context.Background()
	var rows []T
	for _, f := range m.Table(table) {
		ra, err := m.OpenFile(ctx, s, f)
		if err != nil {
			t.Fatal(err)
		}
		if err := schemas.ReadRows(ctx, ra, ra.Size(), func(r T) error { rows = append(rows, r); return nil }); err != nil {
			t.Fatalf("%s: %v", f.Name, err)
		}
	}
	return rows
}

// hfCheckpoint is what vLLM needs of a directory to start on it: a
// config.json and safetensors weights, whose header reads.
func hfCheckpoint(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		return fmt.Errorf("invalid repository ID or local directory specified: %q", dir)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if len(files) == 0 {
		return fmt.Errorf("cannot find any model weights with %q", dir)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if len(b) < 8 || uint64(len(b)-8) < binary.LittleEndian.Uint64(b) {
			return fmt.Errorf("%s: not a safetensors file", f)
		}
		var header map[string]any
		if err := json.Unmarshal(bytes.TrimRight(b[8:8+binary.LittleEndian.Uint64(b)], " "), &header); err != nil {
			return fmt.Errorf("%s: safetensors header: %v", f, err)
		}
	}
	return nil
}

// whaleFor is whale with a longer deadline, for a whole run.
func whaleFor(t *testing.T, d time.Duration, args ...string) cliResult {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	defer slog.SetDefault(slog.Default())
	err := runApp(ctx, &out, &errOut, append([]string{"whale"}, args...))
	return cliResult{stdout: out.String(), stderr: errOut.String(), err: err, code: exitCode(err)}
}

// needLocalSandbox skips where the math domain's local sandbox cannot run
// (no bubblewrap), except on CI, whose Makefile installs it.
func needLocalSandbox(t *testing.T) {
	t.Helper()
	_, err := mathdomain.NewLocalPython(context.Background(), mathdomain.LocalPythonOptions{Log: slog.New(slog.DiscardHandler)})
	if errors.Is(err, mathdomain.ErrNoSandbox) && os.Getenv("CI") != "true" {
		t.Skipf("the local sandbox cannot run here (make tools installs bubblewrap): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// toyTrainerPython is a python3 with torch and jinja2 for the reference
// trainer on the toy model; without one the test is skipped, except on
// CI, whose Makefile installs them.
func toyTrainerPython(t *testing.T) string {
	t.Helper()
	p, err := trainers.FindPython("torch", "jinja2", "numpy")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return p
}

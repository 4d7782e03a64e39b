package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whalerun/whale/internal/s3test"
	"github.com/whalerun/whale/pipeline/ledger"
	"github.com/whalerun/whale/pipeline/schedule"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/stages/evaluate"
	"github.com/whalerun/whale/stages/propose"
	"github.com/whalerun/whale/storage"
)

func TestMain(m *testing.M) {
	if childMain() {
		return
	}
	s3test.Main(m)
}

// folders lists the run's committed stage folders in the order they ran.
func folders(t *testing.T, w *world, run string) []string {
	t.Helper()
	ms, err := storage.ListCommitted(context.Background(), w.store, run)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(ms, func(a, b *storage.Manifest) int { return a.Finished.Compare(b.Finished) })
	var out []string
	for _, m := range ms {
		out = append(out, m.Position+"-"+m.Stage)
	}
	return out
}

// rollouts counts the target-model rollouts the run's committed stages
// hold, training and harness search apart from tests.
func rollouts(t *testing.T, w *world, run string) (train, test int64) {
	t.Helper()
	ms, err := storage.ListCommitted(context.Background(), w.store, run)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		var n int64
		for _, f := range m.Table("rollouts") {
			n += f.Rows
		}
		if strings.HasSuffix(m.Position, "t") {
			test += n
		} else {
			train += n
		}
	}
	return train, test
}

func runToEnd(t *testing.T, r *Runner) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var steps []string
	err := r.RunToEnd(ctx, func(res *StepResult) {
		if !res.Plan.Done() {
			steps = append(steps, res.Plan.Decision.Position+"-"+res.Plan.Stage)
		}
	})
	if err != nil {
		t.Fatalf("run %s: %v (after %v)", r.Run, err, steps)
	}
	return steps
}

// A whole WHALE run with the fixed schedule: every stage of every unit in
// the schedule's order, the rollout accounting of the schedule's
// arithmetic, a ledger of every decision, and a second `run` that finds
// nothing to do.
func TestWhaleFixedRunsToTheEnd(t *testing.T) {
	forEachRoot(t, func(t *testing.T, w *world) {
		exp := w.experiment(t, "fixed", "switch: {mode: fixed, fixed: {epochs: 1, iterations: 2}}\nbudget: {weight_steps: 4}\n")
		r := w.runner(t, exp)
		steps := runToEnd(t, r)
		want := []string{
			"r001-w01-rollout", "r001-w01-filter", "r001-w01-finetune",
			"r001-w02-rollout", "r001-w02-filter", "r001-w02-finetune",
			"r001-wt-evaluate",
			"r001-h01-evaluate",
			"r001-h02-propose", "r001-h02-evaluate",
			"r001-ht-evaluate",
			"r002-w01-rollout", "r002-w01-filter", "r002-w01-finetune",
			"r002-w02-rollout", "r002-w02-filter", "r002-w02-finetune",
			"r002-wt-evaluate",
		}
		if !slices.Equal(steps, want) {
			t.Fatalf("steps:\n%v\nwant:\n%v", steps, want)
		}
		if got := folders(t, w, exp.Name); !slices.Equal(got, want) {
			t.Errorf("committed folders %v, want %v", got, want)
		}
		// The episodes really ran: no failures, and a reward between the
		// extremes, so the filter had something to accept and reject.
		for _, pos := range []string{"r001-w01", "r002-w02"} {
			m, err := storage.LatestCommitted(context.Background(), w.store, exp.Name, pos, StageRollout)
			if err != nil {
				t.Fatal(err)
			}
			if f, mean := num(m.Summary, "failed"), num(m.Summary, "mean_reward"); f != 0 || mean <= 0 || mean >= 1 {
				t.Errorf("%s: %v failed episodes, mean reward %v; want none failed and a mean in (0, 1)", m.Dir, f, mean)
			}
		}
		// Accounting: 4 weight steps of batch 4 × G 2, the incoming harness
		// on 4 search tasks, then 2 candidates on them; tests 4 tasks × k 2.
		ctx := context.Background()
		train, test := rollouts(t, w, exp.Name)
		wantTrain := 4*schedule.WeightStepRollouts(exp) + schedule.HarnessIterationRollouts(exp, 4, 1)
		prop, err := storage.LatestCommitted(ctx, w.store, exp.Name, "r001-h02", StagePropose)
		if err != nil {
			t.Fatal(err)
		}
		valid := int64(num(prop.Summary, "valid"))
		wantTrain += valid * 4
		if train != wantTrain || test != 3*schedule.TestRollouts(4, 2) {
			t.Errorf("rollouts: %d training and search, %d test; want %d and %d (valid candidates %d)",
				train, test, wantTrain, 3*schedule.TestRollouts(4, 2), valid)
		}
		if valid == 0 {
			t.Errorf("the mutate proposer made no valid candidate: %v", prop.Summary)
		}

		// The ledger holds a decision and a commit for every stage, and the
		// end.
		entries, err := ledger.Read(ctx, w.store, exp.Name)
		if err != nil {
			t.Fatal(err)
		}
		var decisions, commits, done int
		for _, e := range entries {
			switch e.Kind {
			case ledger.KindDecision:
				decisions++
			case ledger.KindStage:
				commits++
			case ledger.KindDone:
				done++
			}
		}
		if decisions != len(want) || commits != len(want) || done != 1 {
			t.Errorf("ledger: %d decisions, %d commits, %d done; want %d, %d, 1", decisions, commits, done, len(want), len(want))
		}

		// The model hand-off: rollouts after a finetune name the new
		// checkpoint as an input; the first does not.
		first, err := storage.LatestCommitted(ctx, w.store, exp.Name, "r001-w01", StageRollout)
		if err != nil {
			t.Fatal(err)
		}
		later, err := storage.LatestCommitted(ctx, w.store, exp.Name, "r002-w01", StageRollout)
		if err != nil {
			t.Fatal(err)
		}
		if hasInput(first, "model") || !hasInput(later, "model") {
			t.Errorf("model inputs: first rollout %v, later %v; want none, then the newest finetune", first.Inputs, later.Inputs)
		}

		// A finished run stays finished.
		again := runToEnd(t, r)
		if len(again) != 0 {
			t.Errorf("second run did %v", again)
		}
		p, err := r.Plan(ctx)
		if err != nil || !p.Done() {
			t.Fatalf("plan after the end: %+v, %v", p, err)
		}
	})
}

func hasInput(m *storage.Manifest, name string) bool {
	for _, in := range m.Inputs {
		if in.Name == name {
			return true
		}
	}
	return false
}

// The harness the schedule carries into the next weight phase is the
// phase's winner, chosen over the whole archive.
func TestHarnessPhaseWinnerCarriesOver(t *testing.T) {
	w := newWorld(t, "file://"+t.TempDir())
	exp := w.experiment(t, "carry", "switch: {mode: fixed, fixed: {epochs: 1, iterations: 2}}\nbudget: {weight_steps: 4}\n")
	r := w.runner(t, exp)
	runToEnd(t, r)
	ctx := context.Background()
	var points []evaluate.Score
	for _, pos := range []string{"r001-h01", "r001-h02"} {
		m, err := storage.LatestCommitted(ctx, w.store, exp.Name, pos, StageEvaluate)
		if err != nil {
			t.Fatal(err)
		}
		f, err := evaluate.DecodeSummary(m.Summary)
		if err != nil {
			t.Fatal(err)
		}
		points = append(points, f.Candidates...)
	}
	best := points[0]
	for _, p := range points[1:] {
		if p.Success > best.Success || (p.Success == best.Success && p.MeanTurns < best.MeanTurns) {
			best = p
		}
	}
	next, err := storage.LatestCommitted(ctx, w.store, exp.Name, "r002-w01", StageRollout)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Harness string `json:"harness"`
	}
	if err := decodeConfig(next, &cfg); err != nil {
		t.Fatal(err)
	}
	wantRef := best.HarnessID
	if best.Name == "h0" || (points[0].HarnessID == best.HarnessID && exp.Harness.Initial == "h0") {
		wantRef = cfg.Harness // the baseline may be named h0 or by id
	}
	if cfg.Harness != wantRef {
		t.Errorf("r002-w01 rollout runs harness %s, want the phase winner %s (scores %+v)", cfg.Harness, best.HarnessID, points)
	}
}

// Two Steps at once on one run: one runs the stage, the other gets the
// lease error naming the holder; on file:// and S3.
func TestConcurrentStepsOneRuns(t *testing.T) {
	forEachRoot(t, func(t *testing.T, w *world) {
		w.SetDelay(300 * time.Millisecond) // the stage outlasts the race
		exp := w.experiment(t, "race", "schedule: weights-only\nbudget: {weight_steps: 1}\neval: {test_every_phase: false, k: 2}\n")
		var wg sync.WaitGroup
		errs := make([]error, 2)
		results := make([]*StepResult, 2)
		start := make(chan struct{})
		for i := range 2 {
			r := w.runner(t, exp)
			r.Holder = "stepper-" + string(rune('a'+i))
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i], errs[i] = r.Step(context.Background())
			}()
		}
		close(start)
		wg.Wait()
		ran, busy := 0, 0
		for i, err := range errs {
			var held *storage.LeaseHeldError
			switch {
			case err == nil:
				ran++
				if results[i].Plan.Stage != StageRollout {
					t.Errorf("the step ran %s, want rollout", results[i].Plan.Stage)
				}
			case errors.As(err, &held) && errors.Is(err, storage.ErrLeaseHeld):
				busy++
				if !strings.Contains(err.Error(), "stepper-") {
					t.Errorf("lease error does not name the holder: %v", err)
				}
			default:
				t.Errorf("step %d: %v", i, err)
			}
		}
		if ran != 1 || busy != 1 {
			t.Fatalf("%d ran, %d busy; want one of each", ran, busy)
		}
	})
}

func decodeConfig(m *storage.Manifest, v any) error { return json.Unmarshal(m.Config, v) }

// Every schedule runs to its end on the same data: the units it is made
// of, and rollouts that add up to the schedule's arithmetic and stay in
// the budget.
func TestEverySchedule(t *testing.T) {
	tests := []struct {
		name, body string
		// allowed sections ("w", "h", "wt", "ht") and whether weight units
		// all come before harness units.
		sections  []string
		stagewise bool
		maxTrain  int64 // budget.rollouts, 0 for none
	}{
		{"patience", "switch: {mode: patience, patience: {window: 0.5, burn_in: 0.5, patience: 0.5, harness_min: 2, harness_patience: 1, harness_cap: 3}}\nbudget: {weight_steps: 4}\n",
			[]string{"w", "wt", "h", "ht"}, false, 0},
		{"whale-three-rounds", "switch: {fixed: {epochs: 0.5, iterations: 2}}\nbudget: {weight_steps: 3}\n",
			[]string{"w", "wt", "h", "ht"}, false, 0},
		{"weights-only", "schedule: weights-only\nbudget: {weight_steps: 3}\nswitch: {fixed: {epochs: 1}}\n",
			[]string{"w", "wt"}, false, 0},
		{"harness-only", "schedule: harness-only\nbudget: {harness_iterations: 3}\n",
			[]string{"h", "ht"}, false, 0},
		{"stagewise", "schedule: stagewise\nbudget: {weight_steps: 2, harness_iterations: 2}\n",
			[]string{"w", "wt", "h", "ht"}, true, 0},
		{"fst", "schedule: fst\nswitch: {fixed: {epochs: 0.5, iterations: 2}}\nbudget: {rollouts: 40}\n",
			[]string{"w", "wt", "h", "ht"}, false, 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, "file://"+t.TempDir())
			exp := w.experiment(t, "s-"+tt.name, tt.body)
			r := w.runner(t, exp)
			steps := runToEnd(t, r)
			if len(steps) == 0 {
				t.Fatal("the schedule ran nothing")
			}
			ctx := context.Background()
			ms, err := storage.ListCommitted(ctx, w.store, exp.Name)
			if err != nil {
				t.Fatal(err)
			}
			// Folder names sort h before w; the schedule's order is the
			// positions' own.
			slices.SortStableFunc(ms, func(a, b *storage.Manifest) int {
				c, _ := schedule.ComparePositions(a.Position, b.Position)
				return c
			})
			var train int64
			seenHarness := false
			for _, m := range ms {
				pos, err := schedule.ParsePosition(m.Position)
				if err != nil {
					t.Fatalf("folder %s: %v", m.Dir, err)
				}
				sec := sectionName(pos.Section)
				if !slices.Contains(tt.sections, sec) {
					t.Errorf("%s ran a %s unit (%s)", tt.name, sec, m.Dir)
				}
				var rows int64
				for _, f := range m.Table("rollouts") {
					rows += f.Rows
				}
				switch {
				case pos.Section == schedule.SectionWeight && m.Stage == StageRollout:
					if rows != schedule.WeightStepRollouts(exp) {
						t.Errorf("%s: %d rollouts, want %d", m.Dir, rows, schedule.WeightStepRollouts(exp))
					}
					if tt.stagewise && seenHarness {
						t.Errorf("stagewise trained after harness search (%s)", m.Dir)
					}
					train += rows
				case pos.Section == schedule.SectionHarness && m.Stage == StageEvaluate:
					seenHarness = true
					want := schedule.HarnessIterationRollouts(exp, 4, 1)
					if pos.Index > 1 {
						prop, err := storage.LatestCommitted(ctx, w.store, exp.Name, m.Position, StagePropose)
						if err != nil {
							t.Fatal(err)
						}
						want = int64(num(prop.Summary, "valid")) * 4
						var cfg struct {
							PromptOnly bool `json:"prompt_only"`
						}
						if err := decodeConfig(prop, &cfg); err != nil {
							t.Fatal(err)
						}
						if cfg.PromptOnly != (tt.name == "fst") {
							t.Errorf("%s: prompt_only %v", prop.Dir, cfg.PromptOnly)
						}
					}
					if rows != want {
						t.Errorf("%s: %d rollouts, want %d", m.Dir, rows, want)
					}
					train += rows
				}
			}
			if tt.maxTrain > 0 && train > tt.maxTrain {
				t.Errorf("%d training and search rollouts, over the budget of %d", train, tt.maxTrain)
			}
			last := steps[len(steps)-1]
			if !strings.HasSuffix(last, "t-evaluate") {
				t.Errorf("the run ended with %s, not with a test of its final pair", last)
			}
		})
	}
}

func sectionName(s schedule.Section) string {
	switch s {
	case schedule.SectionWeight:
		return "w"
	case schedule.SectionWeightTest:
		return "wt"
	case schedule.SectionHarness:
		return "h"
	case schedule.SectionHarnessTest:
		return "ht"
	}
	return "t"
}

// Bad input along the way: a trainer that fails, then one that writes
// nothing, stop the run with an error naming the stage, a failure in the
// ledger and nothing committed at that stage; once the trainer is fixed,
// run again resumes and finishes. An agent proposer that writes nothing
// commits an empty proposal and the run goes on.
func TestBadTrainerAndEmptyProposals(t *testing.T) {
	// An object-store root: the agent of a file:// root needs bubblewrap
	// (to hide the bucket), which this test is not about.
	w := newWorld(t, "mem://")
	script := filepath.Join(t.TempDir(), "train.sh")
	write := func(body string) {
		if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	src := experimentSource(t, w, "bad", "switch: {fixed: {epochs: 0.5, iterations: 2}}\nbudget: {weight_steps: 2}\n"+
		"harness: {proposer: agent, agent: {command: 'echo thinking; ./try candidates/h0-*/harness.star $(head -n 1 search_tasks.txt); true'}, candidates_per_iteration: 2, search_set_size: 4}\n")
	src = []byte(strings.Replace(string(src), "harness: {proposer: mutate, candidates_per_iteration: 2, search_set_size: 4}\n", "", 1))
	src = []byte(strings.Replace(string(src), fmt.Sprintf("command: %q", trainer), fmt.Sprintf("command: %q", script), 1))
	exp, err := spec.Parse("bad.yaml", src)
	if err != nil {
		t.Fatal(err)
	}
	r := w.runner(t, exp)
	ctx := context.Background()

	for _, c := range []struct{ body, want string }{
		{"#!/bin/sh\necho loading; echo out of memory >&2; exit 3\n", "exit"},
		{"#!/bin/sh\necho done\n", "wrote nothing"},
	} {
		write(c.body)
		var did []string
		err := r.RunToEnd(ctx, func(res *StepResult) {
			did = append(did, res.Plan.Decision.Position+"-"+res.Plan.Stage+" "+describe(res))
		})
		t.Logf("steps: %v", did)
		if err == nil || !strings.Contains(err.Error(), "finetune at r001-w01") || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("run with a broken trainer: %v; want an error naming finetune at r001-w01 and %q", err, c.want)
		}
		if _, err := storage.LatestCommitted(ctx, w.store, exp.Name, "r001-w01", StageFinetune); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("finetune committed after a failure: %v", err)
		}
	}
	entries, err := ledger.Read(ctx, w.store, exp.Name)
	if err != nil {
		t.Fatal(err)
	}
	failures := 0
	for _, e := range entries {
		if e.Kind == ledger.KindFailure && e.Stage == StageFinetune {
			failures++
		}
	}
	if failures != 2 {
		t.Errorf("%d finetune failures in the ledger, want 2", failures)
	}

	write("#!/bin/sh\n" + trainer + "\n")
	steps := runToEnd(t, r)
	if !slices.Contains(steps, "r001-w01-finetune") || steps[0] != "r001-w01-finetune" {
		t.Errorf("resume did not start at the failed finetune: %v", steps)
	}
	prop, err := storage.LatestCommitted(ctx, w.store, exp.Name, "r001-h02", StagePropose)
	if err != nil {
		t.Fatalf("the empty proposal was not committed: %v", err)
	}
	if num(prop.Summary, "valid") != 0 {
		t.Errorf("agent that writes nothing gave %v valid candidates", prop.Summary["valid"])
	}
	// Its one prototype was played with the run's model, within the
	// planner's budget.
	if num(prop.Summary, "prototype_episodes") != 1 || !strings.Contains(string(prop.Config), fmt.Sprintf(`"episodes":%d`, propose.DefaultPrototypeEpisodes)) {
		t.Errorf("prototypes: summary %v, config %s", prop.Summary, prop.Config)
	}
	ev, err := storage.LatestCommitted(ctx, w.store, exp.Name, "r001-h02", StageEvaluate)
	if err != nil {
		t.Fatalf("the evaluation of an empty proposal was not committed: %v", err)
	}
	if n := num(ev.Summary, "episodes"); n != 0 {
		t.Errorf("empty proposal evaluated with %v episodes", n)
	}
}

func describe(res *StepResult) string {
	if res.Result.Manifest == nil {
		return ""
	}
	return fmt.Sprint(res.Result.Manifest.Summary)
}

// The serving hand-off with vLLM's LoRA adapters: after each finetune the
// new checkpoint is loaded on the server under its model id, and the next
// rollout asks for that model and records the id the server answered
// with. The server is a FAKE vLLM: a recorder of load_lora_adapter calls
// in front of the scripted chat server.
func TestVLLMLoRAHandOffFakeVLLM(t *testing.T) {
	w := newWorld(t, "file://"+t.TempDir())
	target, err := url.Parse(w.server.URL)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var loaded []string
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	fake := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/v1/load_lora_adapter" {
			var body struct {
				Name string `json:"lora_name"`
				Path string `json:"lora_path"`
			}
			if err := json.NewDecoder(req.Body).Decode(&body); err != nil || body.Name == "" || body.Path == "" {
				http.Error(rw, "bad load request", http.StatusBadRequest)
				return
			}
			mu.Lock()
			loaded = append(loaded, body.Name)
			mu.Unlock()
			rw.Write([]byte("Success"))
			return
		}
		proxy.ServeHTTP(rw, req)
	}))
	defer fake.Close()
	src := string(experimentSource(t, w, "lora", "schedule: weights-only\nbudget: {weight_steps: 2}\nswitch: {fixed: {epochs: 1}}\n"))
	src = strings.Replace(src, w.server.URL, fake.URL+"/v1", 1)
	src = strings.Replace(src, "reload: none", "reload: vllm-lora", 1)
	src = strings.Replace(src, "rsft: {group_size: 2, batch_size: 4}", "rsft: {group_size: 2, batch_size: 4, lora: true}", 1)
	exp, err := spec.Parse("lora.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	runToEnd(t, w.runner(t, exp))
	ctx := context.Background()
	ft, err := storage.LatestCommitted(ctx, w.store, exp.Name, "r001-w01", StageFinetune)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := ft.Summary["model_id"].(string)
	if id == "" || id == exp.Model.Name {
		t.Fatalf("finetune model id %q", id)
	}
	mu.Lock()
	gotLoaded := slices.Clone(loaded)
	mu.Unlock()
	if len(gotLoaded) != 2 || gotLoaded[0] != id {
		t.Errorf("adapters loaded %v, want 2 starting with %s", gotLoaded, id)
	}
	next, err := storage.LatestCommitted(ctx, w.store, exp.Name, "r001-w02", StageRollout)
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := next.Summary["model_ids"].([]any)
	if len(ids) != 1 || ids[0] != id {
		t.Errorf("the rollout after the finetune recorded model ids %v, want [%s]", ids, id)
	}
	first, err := storage.LatestCommitted(ctx, w.store, exp.Name, "r001-w01", StageRollout)
	if err != nil {
		t.Fatal(err)
	}
	if ids, _ := first.Summary["model_ids"].([]any); len(ids) != 1 || ids[0] != exp.Model.Name {
		t.Errorf("the first rollout recorded %v, want the base model", ids)
	}
}

// With finetune.on_failure: skip, a failing trainer does not stop the
// run: each step commits untrained, with the base carried forward and the
// trainer's error in its summary.
func TestTrainerFailureSkipped(t *testing.T) {
	w := newWorld(t, "file://"+t.TempDir())
	src := string(experimentSource(t, w, "skip", "schedule: weights-only\nbudget: {weight_steps: 2}\nswitch: {fixed: {epochs: 1}}\n"))
	src = strings.Replace(src, fmt.Sprintf("command: %q, reload: none", trainer), `command: "echo no GPU >&2; exit 7", reload: none, on_failure: skip`, 1)
	exp, err := spec.Parse("skip.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	steps := runToEnd(t, w.runner(t, exp))
	if !slices.Contains(steps, "r001-w02-finetune") || !strings.HasSuffix(steps[len(steps)-1], "wt-evaluate") {
		t.Fatalf("steps %v", steps)
	}
	ctx := context.Background()
	for _, pos := range []string{"r001-w01", "r001-w02"} {
		m, err := storage.LatestCommitted(ctx, w.store, exp.Name, pos, StageFinetune)
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := m.Summary["trainer_error"].(string)
		if m.Summary["trained"] != false || !strings.Contains(msg, "exit") || m.Summary["model_id"] != exp.Model.Name {
			t.Errorf("%s: summary %v; want untrained, the base model and the trainer's error", m.Dir, m.Summary)
		}
	}
}

// finetune.srun wraps the trainer in srun with the spec's arguments, as a
// finetune job inside a GPU allocation runs it. srun here is a FAKE that
// records its arguments and runs the command.
func TestFinetuneSrunFake(t *testing.T) {
	bin := t.TempDir()
	record := filepath.Join(t.TempDir(), "srun-args")
	fake := "#!/bin/sh\necho \"$@\" >> " + record + "\nwhile [ \"${1#-}\" != \"$1\" ]; do shift; done\nexec \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "srun"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	w := newWorld(t, "file://"+t.TempDir())
	src := string(experimentSource(t, w, "srun", "schedule: weights-only\nbudget: {weight_steps: 1}\nswitch: {fixed: {epochs: 0.5}}\n"))
	src = strings.Replace(src, "reload: none}", "reload: none, srun: true, srun_args: [--gpus=8, --ntasks=1]}", 1)
	exp, err := spec.Parse("srun.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	runToEnd(t, w.runner(t, exp))
	got, err := os.ReadFile(record)
	if err != nil {
		t.Fatalf("srun was not called: %v", err)
	}
	if !strings.HasPrefix(string(got), "--gpus=8 --ntasks=1 /bin/sh -c ") {
		t.Errorf("srun called with %q", got)
	}
	m, err := storage.LatestCommitted(context.Background(), w.store, exp.Name, "r001-w01", StageFinetune)
	if err != nil || m.Summary["trained"] != true {
		t.Fatalf("finetune: %v, %v", m, err)
	}
}

package pipeline

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/whalerun/whale/domains/registry"
	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/pipeline/pipelinetest"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/storage"
)

// sumsDomain is a domain written in a test: sums whose answer is the last
// \boxed{} of the reply. It shows what adding a domain takes — a type
// with the episode.Domain methods and one registry.Register call — and
// that nothing else in whale names its domains.
type sumsDomain struct{}

var boxedRE = regexp.MustCompile(`\\boxed\{([^}]*)\}`)

func sumsContract() *harness.Contract {
	return harness.Base().Extend(harness.Contract{
		Name: "sums",
		Hooks: []harness.HookSpec{{
			Name: "parse_action", Params: []string{"text", "state"}, Returns: harness.ActionShape,
			Doc: "The last \\boxed{} of the reply is the answer.",
			Default: func(_ context.Context, _ *harness.Harness, args []any) (any, error) {
				all := boxedRE.FindAllStringSubmatch(args[0].(string), -1)
				if len(all) == 0 {
					return map[string]any{"kind": "invalid", "error": "no \\boxed{} answer"}, nil
				}
				return map[string]any{"kind": "answer", "answer": all[len(all)-1][1]}, nil
			},
		}},
	})
}

func (sumsDomain) Name() string                { return "sums" }
func (sumsDomain) Contract() *harness.Contract { return sumsContract() }
func (sumsDomain) Baseline() []byte {
	return []byte("SYSTEM_PROMPT = \"Add the numbers and put the sum in \\\\boxed{}.\"\nMAX_TURNS = 2\n")
}

func (sumsDomain) NewEnv(_ context.Context, task schemas.Task, _ *harness.Harness) (episode.Env, error) {
	if len(task.Answers) == 0 {
		return nil, fmt.Errorf("task %s: no answer", task.ID)
	}
	return &sumsEnv{task: task}, nil
}

type sumsEnv struct{ task schemas.Task }

func (e *sumsEnv) Reset(context.Context) (map[string]any, error) {
	return map[string]any{"question": e.task.Question}, nil
}

func (e *sumsEnv) Step(_ context.Context, a harness.Action) (episode.Step, error) {
	if a.Kind != "answer" {
		return episode.Step{Illegal: "only answers are allowed"}, nil
	}
	ok := strings.TrimSpace(a.Answer) == e.task.Answers[0]
	reward := 0.0
	if ok {
		reward = 1
	}
	return episode.Step{Done: true, Outcome: episode.Outcome{Reward: reward, Correct: ok, Answer: a.Answer}}, nil
}

func (e *sumsEnv) Tools() []models.Tool { return nil }

func (e *sumsEnv) Final(context.Context) episode.Outcome { return episode.Outcome{} }

// Registering a domain is all it takes to run an experiment on it: the
// spec accepts it and takes its defaults from the entry, and the runtime
// builds it from the registry.
func TestNewDomainRunsAnExperiment(t *testing.T) {
	if err := registry.Register(registry.Entry{Name: "sums", New: func(registry.Resources) episode.Domain { return sumsDomain{} }, LearningRate: 0.5}); err != nil {
		t.Fatal(err)
	}
	if err := registry.Register(registry.Entry{Name: "sums", New: func(registry.Resources) episode.Domain { return sumsDomain{} }}); err == nil {
		t.Error("a second domain called sums was registered")
	}
	w := newWorld(t, "file://"+t.TempDir())
	tasks := pipelinetest.Sums(12)
	for i := range tasks {
		tasks[i].Domain = "sums"
	}
	pipelinetest.WriteDataset(t, w.store, "sums-train", tasks[:4])
	pipelinetest.WriteDataset(t, w.store, "sums-search", tasks[4:8])
	pipelinetest.WriteDataset(t, w.store, "sums-test", tasks[8:])
	src := strings.Replace(string(experimentSource(t, w, "sums", "switch: {mode: fixed, fixed: {epochs: 1, iterations: 2}}\nbudget: {weight_steps: 2}\n")), "domain: math", "domain: sums", 1)
	src = strings.ReplaceAll(src, "datasets/math-", "datasets/sums-")
	exp, err := spec.Parse("sums.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if exp.RSFT.LearningRate != 0.5 || exp.Tools.Sandbox != "" {
		t.Errorf("defaults from the entry: learning rate %g, sandbox %q; want 0.5 and none", exp.RSFT.LearningRate, exp.Tools.Sandbox)
	}
	rt, err := NewRuntime(context.Background(), w.store, exp, RuntimeOptions{Log: discard})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if rt.Domain.Name() != "sums" {
		t.Fatalf("runtime domain %s, want sums", rt.Domain.Name())
	}
	r := &Runner{Planner: Planner{Store: w.store, Run: exp.Name, Spec: exp}, Runtime: rt, Log: discard, Holder: "test " + t.Name()}
	steps := runToEnd(t, r)
	for _, want := range []string{"r001-w01-rollout", "r001-w01-finetune", "r001-h02-propose", "r002-wt-evaluate"} {
		if !slices.Contains(steps, want) {
			t.Errorf("steps %v lack %s", steps, want)
		}
	}
	// The domain's own verifier graded the episodes: none failed, and the
	// FAKE model is right on about half of the seeds.
	m, err := storage.LatestCommitted(context.Background(), w.store, exp.Name, "r001-w01", StageRollout)
	if err != nil {
		t.Fatal(err)
	}
	if f, mean := num(m.Summary, "failed"), num(m.Summary, "mean_reward"); f != 0 || mean <= 0 || mean >= 1 {
		t.Errorf("%s: %v failed episodes, mean reward %v; want none failed and a mean in (0, 1)", m.Dir, f, mean)
	}
	train, test := rollouts(t, w, exp.Name)
	if train == 0 || test == 0 {
		t.Errorf("%d training and %d test rollouts", train, test)
	}
}

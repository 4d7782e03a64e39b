package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

const minimal = `name: t1
domain: math
data:
  train: datasets/a
  search: datasets/b
  test: datasets/c
model:
  name: m
  endpoints: [http://127.0.0.1:8000/v1]
harness:
  proposer: mutate
finetune:
  command: train.sh
  reload: none
budget:
  weight_steps: 10
`

func mustParse(t *testing.T, src string) *Experiment {
	t.Helper()
	e, err := Parse("experiment.yaml", []byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return e
}

func TestExampleFile(t *testing.T) {
	e, err := Load("../../jobs/examples/chess-whale.yaml")
	if err != nil {
		var l ErrorList
		if errors.As(err, &l) {
			t.Fatalf("example does not parse:\n%s", l.Detailed())
		}
		t.Fatal(err)
	}
	if e.Domain != "chess" || e.Schedule != ScheduleWhale || e.Switch.Mode != SwitchFixed {
		t.Errorf("domain/schedule/switch = %s/%s/%s", e.Domain, e.Schedule, e.Switch.Mode)
	}
	if len(e.Model.Endpoints) != 2 || e.Rollout.Concurrency != 128 {
		t.Errorf("endpoints %v, rollout.concurrency %d (want 2 endpoints, 2×64)", e.Model.Endpoints, e.Rollout.Concurrency)
	}
	kw, ok := e.Model.Extra["chat_template_kwargs"].(map[string]any)
	if !ok || kw["enable_thinking"] != false {
		t.Errorf("model.extra = %#v", e.Model.Extra)
	}
	if _, err := Freeze(e, "test", time.Unix(0, 0)); err != nil {
		t.Errorf("Freeze: %v", err)
	}
}

func TestDefaultsFilled(t *testing.T) {
	e := mustParse(t, minimal)
	checks := []struct {
		name      string
		got, want any
	}{
		{"schedule", e.Schedule, ScheduleWhale},
		{"switch.mode", e.Switch.Mode, SwitchFixed},
		{"switch.fixed.epochs", e.Switch.Fixed.Epochs, 0.6},
		{"switch.fixed.iterations", e.Switch.Fixed.Iterations, 6},
		{"switch.patience.window", e.Switch.Patience.Window, 0.2},
		{"switch.patience.burn_in", e.Switch.Patience.BurnIn, 0.2},
		{"switch.patience.patience", e.Switch.Patience.Patience, 0.2},
		{"switch.patience.harness_min", e.Switch.Patience.HarnessMin, 6},
		{"switch.patience.harness_patience", e.Switch.Patience.HarnessPatience, 2},
		{"switch.patience.harness_cap", e.Switch.Patience.HarnessCap, 15},
		{"model.provider", e.Model.Provider, ProviderOpenAI},
		{"model.checkpoint", e.Model.Checkpoint, "m"},
		{"model.temperature", e.Model.Temperature, 1.0},
		{"model.top_k", e.Model.TopK, 20},
		{"model.top_p", e.Model.TopP, 1.0},
		{"rsft.group_size", e.RSFT.GroupSize, 8},
		{"rsft.batch_size", e.RSFT.BatchSize, 256},
		{"rsft.threshold", e.RSFT.Threshold, 0.5},
		{"rsft.learning_rate (math)", e.RSFT.LearningRate, 1e-7},
		{"rsft.sft_epochs", e.RSFT.SFTEpochs, 1},
		{"harness.initial", e.Harness.Initial, "h0"},
		{"harness.candidates_per_iteration", e.Harness.CandidatesPerIteration, 3},
		{"harness.search_set_size", e.Harness.SearchSetSize, 256},
		{"harness.samples_per_candidate", e.Harness.SamplesPerCandidate, 1},
		{"finetune.backend", e.Finetune.Backend, FinetuneCommand},
		{"eval.k", e.Eval.K, 8},
		{"eval.test_every_phase", e.Eval.TestEveryPhase, true},
		{"rollout.shards", e.Rollout.Shards, 1},
		{"rollout.concurrency", e.Rollout.Concurrency, 16},
		{"seed", e.Seed, int64(1)},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

func TestDomainDefaults(t *testing.T) {
	tests := []struct {
		domain   string
		lr       float64
		proposer string
	}{
		{"math", 1e-7, ProposerAgent},
		{"searchqa", 1e-6, ProposerAgent},
		{"chess", 1e-7, ProposerAgent},
		{"demo", 1e-3, ProposerMutate},
	}
	for _, tt := range tests {
		e := Defaults()
		e.Domain = tt.domain
		e.Normalize()
		if e.RSFT.LearningRate != tt.lr || e.Harness.Proposer != tt.proposer {
			t.Errorf("%s: lr %v proposer %s, want %v %s", tt.domain, e.RSFT.LearningRate, e.Harness.Proposer, tt.lr, tt.proposer)
		}
	}
	// The demo without endpoints runs the built-in model end to end.
	e := Defaults()
	e.Domain = "demo"
	e.Normalize()
	if e.Model.Provider != ProviderLocal || e.Finetune.Backend != FinetuneLocal || e.Finetune.Reload != ReloadVLLMLoRA {
		t.Errorf("demo: provider %s backend %s reload %s", e.Model.Provider, e.Finetune.Backend, e.Finetune.Reload)
	}
}

func TestExponentWithoutDot(t *testing.T) {
	e := mustParse(t, minimal+"rsft: {learning_rate: 1e-6}\n")
	if e.RSFT.LearningRate != 1e-6 {
		t.Errorf("learning_rate = %v, want 1e-6", e.RSFT.LearningRate)
	}
	// Quoted, it is a string as written.
	if _, err := Parse("experiment.yaml", []byte(minimal+"rsft: {learning_rate: \"1e-6\"}\n")); err == nil {
		t.Error("a quoted number was accepted for a number field")
	}
}

func TestExplicitZeroKept(t *testing.T) {
	// Zero is meaningful for these; a default must not overwrite it.
	e := mustParse(t, minimal+`eval:
  test_every_phase: false
seed: 0
`)
	if e.Eval.TestEveryPhase || e.Seed != 0 {
		t.Errorf("test_every_phase %v seed %d, want false 0", e.Eval.TestEveryPhase, e.Seed)
	}
	e = mustParse(t, strings.Replace(minimal, "  name: m\n", "  name: m\n  temperature: 0\n", 1))
	if e.Model.Temperature != 0 {
		t.Errorf("temperature %v, want 0", e.Model.Temperature)
	}
}

// replaceLine swaps the line starting with prefix for repl in minimal.
func replaceLine(t *testing.T, prefix, repl string) string {
	t.Helper()
	lines := strings.Split(minimal, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, prefix) {
			lines[i] = repl
			return strings.Join(lines, "\n")
		}
	}
	t.Fatalf("no line %q", prefix)
	return ""
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		// wants are substrings of the error text, in order of appearance.
		wants []string
	}{
		{"unknown field", minimal + "rsft:\n  group_size: 4\n  bach_size: 12\n",
			[]string{`experiment.yaml:19:3: unknown field "bach_size" in rsft (known: batch_size, group_size, `, `did you mean "batch_size"?`}},
		{"unknown top-level field", minimal + "sheduel: whale\n",
			[]string{`experiment.yaml:17:1: unknown field "sheduel" at top level`, `did you mean "schedule"?`}},
		{"wrong type mapping for string", minimal + "schedule:\n  kind: whale\n",
			[]string{`experiment.yaml:18:3: field schedule: expected string, found mapping`}},
		{"wrong type flow mapping", minimal + "schedule: {kind: whale}\n",
			[]string{`experiment.yaml:17:11: field schedule: expected string, found mapping`}},
		{"integer for string", replaceLine(t, "  name: m", "  name: 7"),
			[]string{`experiment.yaml:8:9: field model.name: expected string, found integer 7 (quote it: "7")`}},
		{"float for integer", minimal + "rsft:\n  batch_size: 0.5\n",
			[]string{`experiment.yaml:18:15: field rsft.batch_size: expected integer, found float 0.5`}},
		{"string for number", minimal + "rsft:\n  threshold: high\n",
			[]string{`experiment.yaml:18:14: field rsft.threshold: expected number, found string high`}},
		{"list element type", replaceLine(t, "  endpoints:", "  endpoints: [http://a:1/v1, {x: 1}]"),
			[]string{`experiment.yaml:9:30: field model.endpoints[1]: expected string, found mapping`}},
		{"scalar for list", replaceLine(t, "  endpoints:", "  endpoints: http://a:1/v1"),
			[]string{`experiment.yaml:9:14: field model.endpoints: expected list, found string`}},
		{"bool", minimal + "eval:\n  test_every_phase: yes please\n",
			[]string{`field eval.test_every_phase: expected boolean (true or false), found string`}},
		{"infinity", minimal + "rsft:\n  threshold: .inf\n",
			[]string{`experiment.yaml:18:14: field rsft.threshold: expected a finite number`}},
		{"integer overflow", minimal + "seed: 99999999999999999999\n",
			[]string{`field seed: `}},
		{"bad enum", replaceLine(t, "domain: math", "domain: maths"),
			[]string{`experiment.yaml:2:9: field domain: must be one of searchqa, math, chess, demo; got "maths"`}},
		{"bad schedule", minimal + "schedule: wale\n",
			[]string{`experiment.yaml:17:11: field schedule: must be one of whale, weights-only, harness-only, stagewise, fst; got "wale"`}},
		{"threshold out of range", minimal + "rsft:\n  threshold: 1.5\n",
			[]string{`experiment.yaml:18:14: field rsft.threshold: must be in [0, 1], got 1.5`}},
		{"group size", minimal + "rsft:\n  group_size: 0\n",
			[]string{`experiment.yaml:18:15: field rsft.group_size: must be at least 1, got 0`}},
		{"epochs", minimal + "switch:\n  fixed:\n    epochs: 0\n",
			[]string{`experiment.yaml:19:13: field switch.fixed.epochs: must be a number > 0, got 0`}},
		{"harness cap", minimal + "switch:\n  mode: patience\n  patience: {harness_min: 6, harness_cap: 3}\n",
			[]string{`field switch.patience.harness_cap: must be at least harness_min (6), got 3`}},
		{"missing name", strings.Replace(minimal, "name: t1\n", "", 1),
			[]string{`experiment.yaml: field name: required`}},
		{"bad name", replaceLine(t, "name: t1", "name: My_Run"),
			[]string{`experiment.yaml:1:7: field name: must be lowercase letters`}},
		{"missing data points at block", strings.Replace(minimal, "  train: datasets/a\n", "", 1),
			[]string{`experiment.yaml:4:3: field data.train: required`}},
		{"endpoint url", replaceLine(t, "  endpoints:", "  endpoints: [localhost:8000]"),
			[]string{`field model.endpoints[0]: must be an http:// or https:// URL`}},
		{"endpoint credentials are not echoed", replaceLine(t, "  endpoints:", "  endpoints: [\"http://u:hunter2@h:1/v1\"]"),
			[]string{`field model.endpoints[0]: must not carry credentials (http://REDACTED@h:1/v1)`}},
		{"duplicate block", minimal + "model:\n  api_key_env: K\n",
			[]string{`experiment.yaml:17:1: mapping key "model" already defined at [7:1]`}},
		{"reserved extra", strings.Replace(minimal, "  name: m\n", "  name: m\n  extra: {temperature: 0.1}\n", 1),
			[]string{`field model.extra.temperature: is set by whale`}},
		{"duplicate key", minimal + "seed: 1\nseed: 2\n",
			[]string{`experiment.yaml:18:1: mapping key "seed" already defined at [17:1]`}},
		{"syntax error", minimal + "seed: [1, 2\n",
			[]string{`experiment.yaml:17:7: sequence end token ']' not found`}},
		{"top level list", "- a\n- b\n",
			[]string{`experiment.yaml:1:1: expected a mapping of experiment fields at top level, found list`}},
		{"empty file", "# nothing\n",
			[]string{`experiment.yaml: the file holds no experiment fields`}},
		{"two documents", minimal + "---\nname: x\n",
			[]string{`expected one YAML document, found 2`}},
		{"unknown alias", minimal + "seed: *nope\n",
			[]string{`unknown alias`}},
		{"unsupported tag", minimal + "seed: !custom 3\n",
			[]string{`field seed: unsupported tag !custom`}},
		{"errors are collected", minimal + "rsft:\n  bach_size: 1\n  lora: maybe\n",
			[]string{`18:3: unknown field "bach_size"`, `19:9: field rsft.lora: expected boolean`}},
		{"fst needs budget and agent command", "name: f\ndomain: chess\nschedule: fst\ndata: {train: a, search: b}\neval: {test_every_phase: false}\nmodel: {name: m, endpoints: ['http://h:1']}\nfinetune: {command: x, reload: none}\n",
			[]string{`field harness.agent.command: required`, `field budget: set at least one of weight_steps`}},
		{"command backend needs reload", strings.Replace(minimal, "  reload: none\n", "", 1),
			[]string{`field finetune.reload: required for backend command`}},
		{"vllm-weights loads a full checkpoint", strings.Replace(minimal, "  reload: none\n", "  reload: vllm-weights\n", 1) + "rsft: {lora: true}\n",
			[]string{`field finetune.reload: vllm-weights loads a full checkpoint, but rsft.lora is true: load adapters with vllm-lora`}},
		{"vllm-lora needs lora", strings.Replace(minimal, "  reload: none\n", "  reload: vllm-lora\n", 1),
			[]string{`field finetune.reload: vllm-lora loads LoRA adapters; set rsft.lora: true, or for a full fine-tune choose vllm-weights`}},
		{"unknown reload", strings.Replace(minimal, "  reload: none\n", "  reload: vllm-reload\n", 1),
			[]string{`field finetune.reload: must be one of none, vllm-lora, vllm-weights, command; got "vllm-reload"`}},
		{"reload command needs its command", strings.Replace(minimal, "  reload: none\n", "  reload: command\n", 1),
			[]string{`field finetune.reload_command: required`, `jobs/vllm/reload.sh`}},
		{"stagewise needs harness iterations", minimal + "schedule: stagewise\n",
			[]string{`field budget.harness_iterations: required for schedule stagewise`}},
		{"searchqa needs a retriever", replaceLine(t, "domain: math", "domain: searchqa"),
			[]string{`field tools.retriever: required for searchqa`}},
		{"retriever url", replaceLine(t, "domain: math", "domain: searchqa") + "tools: {retriever: 'localhost:8000'}\n",
			[]string{`field tools.retriever: must be an http:// or https:// URL`}},
		{"retriever index name", replaceLine(t, "domain: math", "domain: searchqa") + "tools: {retriever: 'index:../x'}\n",
			[]string{`field tools.retriever: index name: `}},
		{"sandbox url", minimal + "tools: {sandbox: remote}\n",
			[]string{`field tools.sandbox: must be an http:// or https:// URL`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("experiment.yaml", []byte(tt.src))
			if err == nil {
				t.Fatalf("no error for:\n%s", tt.src)
			}
			msg := err.Error()
			rest := msg
			for _, w := range tt.wants {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("error does not contain %q (in order):\n%s", w, msg)
				}
				rest = rest[i+len(w):]
			}
			var l ErrorList
			if !errors.As(err, &l) || len(l) == 0 {
				t.Fatalf("error is %T, want ErrorList", err)
			}
			for _, e := range l {
				if strings.Contains(e.Error(), "\n") {
					t.Errorf("error spans lines: %q", e.Error())
				}
			}
		})
	}
}

func TestAPIKeyNotEchoed(t *testing.T) {
	src := strings.Replace(minimal, "  name: m\n", "  name: m\n  api_key_env: sk-abc123secret\n", 1)
	_, err := Parse("experiment.yaml", []byte(src))
	if err == nil || !strings.Contains(err.Error(), "model.api_key_env: must name an environment variable") {
		t.Fatalf("err = %v", err)
	}
	var l ErrorList
	errors.As(err, &l)
	if strings.Contains(l.Detailed(), "abc123secret") {
		t.Errorf("error echoes the key:\n%s", l.Detailed())
	}
	src = strings.Replace(minimal, "http://127.0.0.1:8000/v1", "http://user:hunter2@127.0.0.1:8000/v1", 1)
	_, err = Parse("experiment.yaml", []byte(src))
	errors.As(err, &l)
	if err == nil || strings.Contains(l.Detailed(), "hunter2") {
		t.Errorf("error echoes the password: %v", err)
	}
}

func TestSnippet(t *testing.T) {
	_, err := Parse("experiment.yaml", []byte(minimal+"rsft:\n  bach_size: 1\n"))
	var l ErrorList
	if !errors.As(err, &l) {
		t.Fatalf("err = %v", err)
	}
	want := "   18 |   bach_size: 1\n          ^"
	if l[0].Snippet != want {
		t.Errorf("snippet\n%q\nwant\n%q", l[0].Snippet, want)
	}
}

func TestSwitchShorthand(t *testing.T) {
	e := mustParse(t, minimal+"switch: patience\n")
	if e.Switch.Mode != SwitchPatience || e.Switch.Patience.HarnessCap != 15 {
		t.Errorf("switch = %+v", e.Switch)
	}
	_, err := Parse("experiment.yaml", []byte(minimal+"switch: sometimes\n"))
	if err == nil || !strings.Contains(err.Error(), `field switch.mode: must be one of fixed, patience; got "sometimes"`) {
		t.Errorf("err = %v", err)
	}
}

func TestAnchorsAndMerge(t *testing.T) {
	src := minimal + `x-common: &ep http://10.0.0.1:8000/v1
`
	if _, err := Parse("experiment.yaml", []byte(src)); err == nil {
		t.Fatal("unknown top-level anchor holder accepted")
	}
	src = strings.Replace(minimal, "  endpoints: [http://127.0.0.1:8000/v1]\n", "  endpoints: [&ep http://127.0.0.1:8000/v1]\n", 1)
	src = strings.Replace(src, "  proposer: mutate\n",
		"  proposer: llm\n  llm:\n    <<: {name: big, temperature: 0.2}\n    temperature: 0.7\n    endpoints: [*ep]\n", 1)
	e := mustParse(t, src)
	if e.Harness.LLM.Name != "big" || e.Harness.LLM.Temperature != 0.7 || len(e.Harness.LLM.Endpoints) != 1 || e.Harness.LLM.Endpoints[0] != "http://127.0.0.1:8000/v1" {
		t.Errorf("llm = %+v", e.Harness.LLM)
	}
}

func TestDigestStable(t *testing.T) {
	reordered := `# same experiment, other order and style
budget: {weight_steps: 10}
finetune: {reload: none, command: "train.sh"}
harness: {proposer: mutate}
model:
  endpoints:
    - "http://127.0.0.1:8000/v1"
  name: 'm'
data: {test: datasets/c, search: datasets/b, train: datasets/a}
domain: math
name: t1
rsft:
  batch_size: 256   # the default, written out
`
	d1 := digestOf(t, minimal)
	d2 := digestOf(t, reordered)
	if d1 != d2 {
		t.Errorf("digest depends on key order: %s vs %s", d1, d2)
	}
	if !strings.HasPrefix(d1, "sha256:") || len(d1) != len("sha256:")+64 {
		t.Errorf("digest %q", d1)
	}
	changed := []string{
		strings.Replace(minimal, "weight_steps: 10", "weight_steps: 11", 1),
		minimal + "seed: 2\n",
		minimal + "rsft: {threshold: 0.25}\n",
		strings.Replace(minimal, "  name: m\n", "  name: m\n  extra: {foo: 1}\n", 1),
	}
	for _, src := range changed {
		if d := digestOf(t, src); d == d1 {
			t.Errorf("digest unchanged for:\n%s", src)
		}
	}
}

func digestOf(t *testing.T, src string) string {
	t.Helper()
	r, err := Freeze(mustParse(t, src), "v0", time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	return r.SpecDigest
}

func TestFreezeRoundTrip(t *testing.T) {
	e := mustParse(t, strings.Replace(minimal, "  name: m\n", "  name: m\n  extra: {chat_template_kwargs: {enable_thinking: false}, big: 9007199254740993, ratio: 0.1}\n", 1))
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	r, err := Freeze(e, "v1.2.3", now)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Created.Equal(now) || r.Created.Location() != time.UTC {
		t.Errorf("created %v", r.Created)
	}
	data, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeRun("run.json", data)
	if err != nil {
		t.Fatalf("DecodeRun: %v\n%s", err, data)
	}
	if back.SpecDigest != r.SpecDigest || back.WhaleVersion != "v1.2.3" {
		t.Errorf("round trip: %s %s", back.SpecDigest, back.WhaleVersion)
	}
	if d, _ := Digest(&back.Spec); d != r.SpecDigest {
		t.Errorf("digest of decoded spec %s, frozen %s", d, r.SpecDigest)
	}
	if diff := Diff(&back.Spec, e); len(diff) != 0 {
		t.Errorf("diff after round trip: %v", diff)
	}
	if err := CheckSame(back, e); err != nil {
		t.Errorf("CheckSame: %v", err)
	}

	tampered := strings.Replace(string(data), `"batch_size": 256`, `"batch_size": 128`, 1)
	if tampered == string(data) {
		t.Fatal("fixture: batch_size not found in run.json")
	}
	if _, err := DecodeRun("run.json", []byte(tampered)); err == nil || !strings.Contains(err.Error(), "run.json: spec_digest is") {
		t.Errorf("tampered run.json: err = %v", err)
	}
	future := strings.Replace(string(data), `"seed": 1`, `"seed": 1, "kubernetes": {}`, 1)
	if _, err := DecodeRun("run.json", []byte(future)); err == nil || !strings.Contains(err.Error(), `unknown field "kubernetes"`) {
		t.Errorf("unknown field: err = %v", err)
	}
}

func TestFreezeRejectsInvalid(t *testing.T) {
	e := Defaults()
	e.Name = "x"
	_, err := Freeze(&e, "v", time.Now())
	if err == nil || !strings.Contains(err.Error(), "field domain: required") {
		t.Errorf("err = %v", err)
	}
}

func TestDiff(t *testing.T) {
	a := mustParse(t, minimal)
	tests := []struct {
		name string
		edit func(*Experiment)
		want []string
	}{
		{"same", func(*Experiment) {}, nil},
		{"scalars", func(e *Experiment) { e.RSFT.BatchSize = 128; e.Seed = 7 }, []string{"rsft.batch_size", "seed"}},
		{"list element", func(e *Experiment) { e.Model.Endpoints = []string{"http://other:1/v1"} }, []string{"model.endpoints[0]"}},
		{"list length", func(e *Experiment) { e.Model.Endpoints = append(e.Model.Endpoints, "http://b:1") }, []string{"model.endpoints"}},
		{"map key", func(e *Experiment) { e.Model.Extra = map[string]any{"a b": 1} }, []string{`model.extra["a b"]`}},
		{"nested", func(e *Experiment) { e.Switch.Patience.HarnessCap = 20 }, []string{"switch.patience.harness_cap"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := a.Clone()
			tt.edit(b)
			got := Diff(a, b)
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("Diff = %v, want %v", got, tt.want)
			}
		})
	}
	// Numbers compare by value across Go types (YAML int64 vs JSON number).
	b := a.Clone()
	a.Model.Extra = map[string]any{"n": int64(3)}
	b.Model.Extra = map[string]any{"n": float64(3)}
	if d := Diff(a, b); len(d) != 0 {
		t.Errorf("int64 3 vs float64 3: %v", d)
	}
}

func TestCheckSameMismatch(t *testing.T) {
	a := mustParse(t, minimal)
	r, err := Freeze(a, "v", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b := mustParse(t, minimal+"rsft: {group_size: 4}\n")
	err = CheckSame(r, b)
	var me *MismatchError
	if !errors.As(err, &me) || !errors.Is(err, ErrSpecMismatch) {
		t.Fatalf("err = %v", err)
	}
	if len(me.Paths) != 1 || me.Paths[0] != "rsft.group_size" || !strings.Contains(err.Error(), "rsft.group_size") {
		t.Errorf("mismatch: %v", err)
	}
}

// A run.json written by an older whale lacks the keys of fields added
// since; re-initializing it from the same file is not a conflict, while a
// real change still is.
func TestCheckSameAcrossVersions(t *testing.T) {
	e := mustParse(t, minimal)
	r, err := Freeze(e, "v", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	data, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	// An older whale: no eval.test_every_phase and no rollout object
	// (fields with defaults, unset in the file), and the digest over what
	// it wrote.
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	sp := doc["spec"].(map[string]any)
	ev := sp["eval"].(map[string]any)
	if ev["test_every_phase"] != true || sp["rollout"] == nil {
		t.Fatal("fixture: the spec lacks eval.test_every_phase or rollout")
	}
	delete(ev, "test_every_phase")
	delete(sp, "rollout")
	raw, err := json.Marshal(sp)
	if err != nil {
		t.Fatal(err)
	}
	c, err := canonicalize(raw)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(c)
	doc["spec_digest"] = "sha256:" + hex.EncodeToString(sum[:])
	old, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	prev, err := DecodeRun("run.json", old)
	if err != nil {
		t.Fatal(err)
	}
	if prev.SpecDigest == r.SpecDigest {
		t.Fatal("fixture: the older digest equals today's")
	}
	// What the older whale did not write reads as today's default.
	if !prev.Spec.Eval.TestEveryPhase || prev.Spec.Rollout.Shards != 1 {
		t.Errorf("missing fields read as test_every_phase %v, shards %d; want the defaults", prev.Spec.Eval.TestEveryPhase, prev.Spec.Rollout.Shards)
	}
	tests := []struct {
		name  string
		spec  string
		paths []string // nil: same experiment
	}{
		{"same file", minimal, nil},
		{"a changed field", minimal + "rsft: {group_size: 4}\n", []string{"rsft.group_size"}},
		{"the added field set", minimal + "rollout: {shards: 4}\n", []string{"rollout.shards"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckSame(prev, mustParse(t, tt.spec))
			var me *MismatchError
			switch {
			case tt.paths == nil && err != nil:
				t.Errorf("CheckSame: %v", err)
			case tt.paths != nil && !errors.As(err, &me):
				t.Errorf("CheckSame = %v, want a mismatch in %v", err, tt.paths)
			case tt.paths != nil && strings.Join(me.Paths, ",") != strings.Join(tt.paths, ","):
				t.Errorf("mismatch in %v, want %v", me.Paths, tt.paths)
			}
		})
	}
}

func TestNormalizeIdempotentAndCloneIndependent(t *testing.T) {
	e := mustParse(t, minimal)
	c := e.Clone()
	c.Normalize()
	if d := Diff(e, c); len(d) != 0 {
		t.Errorf("second Normalize changed %v", d)
	}
	c.Model.Endpoints[0] = "http://changed:1"
	c.Model.Extra["k"] = "v"
	if e.Model.Endpoints[0] == "http://changed:1" || len(e.Model.Extra) != 0 {
		t.Error("Clone shares lists or maps with the original")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(minimal))
	f.Add([]byte("switch: patience\n"))
	f.Add([]byte("a: &x [1, *x]\n<<: *x\n"))
	f.Add([]byte("model: {extra: {a: [1, {b: .nan}]}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := Parse("f.yaml", data)
		if err == nil {
			if verr := e.Validate(); verr != nil {
				t.Fatalf("Parse accepted a spec that Validate rejects: %v", verr)
			}
			if _, err := Freeze(e, "v", time.Unix(0, 0)); err != nil {
				t.Fatalf("Freeze of a parsed spec: %v", err)
			}
		}
	})
}

func TestToolsDefaultsAndAccepted(t *testing.T) {
	tests := []struct {
		name, src, retriever, sandbox string
	}{
		{"math defaults to the local sandbox", minimal, "", SandboxLocal},
		{"math with SandboxFusion", minimal + "tools: {sandbox: 'http://127.0.0.1:8080'}\n", "", "http://127.0.0.1:8080"},
		{"searchqa with a stored index", replaceLine(t, "domain: math", "domain: searchqa") + "tools: {retriever: 'index:wiki-18'}\n", "index:wiki-18", ""},
		{"searchqa with a server", replaceLine(t, "domain: math", "domain: searchqa") + "tools: {retriever: 'http://127.0.0.1:8000'}\n", "http://127.0.0.1:8000", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := Parse("experiment.yaml", []byte(tt.src))
			if err != nil {
				t.Fatal(err)
			}
			if e.Tools.Retriever != tt.retriever || e.Tools.Sandbox != tt.sandbox {
				t.Errorf("tools = %+v, want retriever %q sandbox %q", e.Tools, tt.retriever, tt.sandbox)
			}
		})
	}
}

func TestSlurmResources(t *testing.T) {
	e := mustParse(t, minimal+`slurm:
  default: {partition: cpu, time: 2h, cpus: 4, mem: 16G, prologue: ["source venv/bin/activate"]}
  stages:
    finetune: {partition: gpu, gpus: 8, gpu_type: a100, time: "1-00:00:00", extra: ["--exclusive"]}
    rollout: {max_parallel: 4}
`)
	ft := e.Slurm.For("finetune")
	if ft.Partition != "gpu" || ft.GPUs != 8 || ft.CPUs != 4 || ft.Mem != "16G" || ft.Time != "1-00:00:00" ||
		len(ft.Extra) != 1 || len(ft.Prologue) != 1 {
		t.Errorf("finetune resources %+v", ft)
	}
	if ro := e.Slurm.For("rollout"); ro.Partition != "cpu" || ro.MaxParallel != 4 || ro.Time != "2h" {
		t.Errorf("rollout resources %+v", ro)
	}
	if f := e.Slurm.For("filter"); f.Partition != "cpu" || f.GPUs != 0 {
		t.Errorf("filter resources %+v", f)
	}
	for _, c := range []struct{ src, want string }{
		{"slurm: {stages: {train: {gpus: 1}}}\n", "field slurm.stages.train: is not a stage"},
		{"slurm: {default: {time: soon}}\n", "field slurm.default.time: time \"soon\""},
		{"slurm: {stages: {finetune: {gpus: -1}}}\n", "field slurm.stages.finetune.gpus: must be at least 0"},
		{"slurm: {default: {extra: [exclusive]}}\n", "field slurm.default.extra[0]: must be an sbatch option"},
	} {
		_, err := Parse("experiment.yaml", []byte(minimal+c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err %v, want %q", c.src, err, c.want)
		}
	}
	for _, c := range []struct {
		in   string
		want time.Duration
	}{{"90m", 90 * time.Minute}, {"30", 30 * time.Minute}, {"1:30", 90 * time.Second}, {"2:00:00", 2 * time.Hour}, {"1-12", 36 * time.Hour}} {
		if d, err := ParseTimeLimit(c.in); err != nil || d != c.want {
			t.Errorf("ParseTimeLimit(%q) = %v, %v; want %v", c.in, d, err, c.want)
		}
	}
}

// tools.retriever_api_key_env came after runs were frozen: left empty it
// is not in the canonical form, so a spec without it has the digest it
// had before (taken from the whale before the field), and a run.json
// without the key is the same experiment as the file read today; setting
// it is a change, and it is validated like model.api_key_env.
func TestRetrieverAPIKeyEnv(t *testing.T) {
	const src = `name: sqa
domain: searchqa
data: {train: datasets/a, search: datasets/b, test: datasets/c}
model: {name: m, endpoints: ['http://127.0.0.1:8000/v1']}
harness: {proposer: mutate}
finetune: {command: train.sh, reload: none}
tools: {retriever: 'http://127.0.0.1:8002'}
budget: {weight_steps: 10}
`
	const before = "sha256:98fdc991f9158c638f6e867313e96c4a0894003e4e854f36a1243fe03459e529"
	plain := mustParse(t, src)
	r, err := Freeze(plain, "v", time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if r.SpecDigest != before {
		t.Errorf("digest %s, was %s before tools.retriever_api_key_env", r.SpecDigest, before)
	}
	c, err := CanonicalJSON(&r.Spec)
	if err != nil || strings.Contains(string(c), "retriever_api_key_env") {
		t.Errorf("canonical form holds the empty field: %s %v", c, err)
	}
	set := mustParse(t, strings.Replace(src, "tools: {retriever: 'http://127.0.0.1:8002'}", "tools: {retriever: 'http://127.0.0.1:8002', retriever_api_key_env: WHALE_SERVE_TOKEN}", 1))
	if set.Tools.RetrieverAPIKeyEnv != "WHALE_SERVE_TOKEN" {
		t.Fatalf("tools = %+v", set.Tools)
	}
	var me *MismatchError
	if err := CheckSame(r, set); !errors.As(err, &me) || strings.Join(me.Paths, ",") != "tools.retriever_api_key_env" {
		t.Errorf("CheckSame with the key set = %v", err)
	}
	rs, err := Freeze(set, "v", time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	data, err := rs.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeRun("run.json", data)
	if err != nil || back.Spec.Tools.RetrieverAPIKeyEnv != "WHALE_SERVE_TOKEN" || CheckSame(back, set) != nil {
		t.Fatalf("round trip: %+v %v", back, err)
	}

	for _, tc := range []struct{ tools, want string }{
		{"{retriever: 'http://127.0.0.1:8002', retriever_api_key_env: 'idx-93b1e7 secret'}", "must name an environment variable"},
		{"{retriever: 'index:wiki', retriever_api_key_env: WHALE_SERVE_TOKEN}", "not an http(s) URL"},
	} {
		_, err := Parse("experiment.yaml", []byte(strings.Replace(src, "tools: {retriever: 'http://127.0.0.1:8002'}", "tools: "+tc.tools, 1)))
		if err == nil || !strings.Contains(err.Error(), "tools.retriever_api_key_env") || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "93b1e7") {
			t.Errorf("%s: %v", tc.tools, err)
		}
	}
}

// reload: vllm-weights is a full fine-tune's hand-off to running vLLM
// servers: it parses with the command backend and no LoRA.
func TestReloadVLLMWeights(t *testing.T) {
	e := mustParse(t, strings.Replace(minimal, "  reload: none\n", "  reload: vllm-weights\n", 1))
	if e.Finetune.Reload != ReloadVLLMWeights || e.RSFT.LoRA {
		t.Fatalf("reload %q, lora %v", e.Finetune.Reload, e.RSFT.LoRA)
	}
}

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/whalerun/whale/pipeline/spec"
)

const (
	repoRoot    = "../.."
	examplesDir = "../../jobs/examples"
)

// repoPathRE finds the repository paths an example's text names (its
// comments included): anything under jobs/.
var repoPathRE = regexp.MustCompile(`(?:^|[\s(="'\x60])(jobs/[A-Za-z0-9_./-]*[A-Za-z0-9_])`)

// commandPaths are the words of a shell command that name a file of the
// repository: relative, with a directory, no URL, no variable.
func commandPaths(cmd string) []string {
	var out []string
	for _, w := range strings.Fields(cmd) {
		w = strings.Trim(w, `"'`)
		if !strings.Contains(w, "/") || strings.Contains(w, "://") || strings.ContainsAny(w, "$()") ||
			strings.HasPrefix(w, "-") || filepath.IsAbs(w) {
			continue
		}
		out = append(out, w)
	}
	return out
}

// paperSettings are the paper's settings every example but the built-in
// demo keeps (LoRA examples choose their own learning rate).
func checkPaperSettings(t *testing.T, e *spec.Experiment) {
	t.Helper()
	lr := map[string]float64{"searchqa": 1e-6, "math": 1e-7, "chess": 1e-7}[e.Domain]
	checks := []struct {
		field     string
		got, want any
	}{
		{"rsft.group_size", e.RSFT.GroupSize, 8},
		{"rsft.batch_size", e.RSFT.BatchSize, 256},
		{"rsft.threshold", e.RSFT.Threshold, 0.5},
		{"rsft.sft_epochs", e.RSFT.SFTEpochs, 1},
		{"model.temperature", e.Model.Temperature, 1.0},
		{"model.top_k", e.Model.TopK, 20},
		{"model.top_p", e.Model.TopP, 1.0},
		{"harness.initial", e.Harness.Initial, "h0"},
		{"harness.candidates_per_iteration", e.Harness.CandidatesPerIteration, 3},
		{"harness.search_set_size", e.Harness.SearchSetSize, 256},
		{"harness.samples_per_candidate", e.Harness.SamplesPerCandidate, 1},
		{"eval.k", e.Eval.K, 8},
	}
	if !e.RSFT.LoRA {
		checks = append(checks, struct {
			field     string
			got, want any
		}{"rsft.learning_rate", e.RSFT.LearningRate, lr})
	}
	switch e.Switch.Mode {
	case spec.SwitchFixed:
		checks = append(checks, []struct {
			field     string
			got, want any
		}{{"switch.fixed.epochs", e.Switch.Fixed.Epochs, 0.6}, {"switch.fixed.iterations", e.Switch.Fixed.Iterations, 6}}...)
	case spec.SwitchPatience:
		p := e.Switch.Patience
		checks = append(checks, []struct {
			field     string
			got, want any
		}{{"switch.patience.window", p.Window, 0.2}, {"switch.patience.burn_in", p.BurnIn, 0.2}, {"switch.patience.patience", p.Patience, 0.2},
			{"switch.patience.harness_min", p.HarnessMin, 6}, {"switch.patience.harness_patience", p.HarnessPatience, 2}, {"switch.patience.harness_cap", p.HarnessCap, 15}}...)
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want the paper's %v", c.field, c.got, c.want)
		}
	}
}

// TestExamples: every experiment file under jobs/examples inits with
// `whale init`, names only files that exist in the repository (the words
// of its trainer, reload and agent commands, and every jobs/... path its
// text gives, comments included) or marked user paths (a checkpoint under
// /models/), and the paper's examples keep the paper's settings. Datasets,
// endpoints and services are the user's and are not looked up.
//
// An example whose reload_command is jobs/vllm/reload.sh sets the
// variables that script needs (jobs/vllm/README.md), naming the same
// servers as model.endpoints.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(examplesDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".yaml"))
	}
	demoExamples := map[string]demoWorld{}
	for _, w := range demoWorlds {
		demoExamples[strings.TrimSuffix(filepath.Base(w.example), ".yaml")] = w
	}
	for _, want := range []string{"searchqa-whale", "searchqa-whale-patience", "math-whale", "math-whale-patience", "chess-whale", "chess-whale-lora", "demo", "searchdemo"} {
		if !slices.Contains(names, want) {
			t.Errorf("jobs/examples has no %s.yaml (has %v)", want, names)
		}
	}
	root := fileRoot(t)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			initFile := f
			world, isDemo := demoExamples[name]
			if isDemo {
				// A demo's checkpoint is written next to it, as `whale
				// demo` does.
				dir := t.TempDir()
				initFile = filepath.Join(dir, filepath.Base(f))
				src, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				e, err := spec.Parse(f, src)
				if err != nil {
					t.Fatal(err)
				}
				for path, data := range map[string][]byte{initFile: src, filepath.Join(dir, e.Model.Checkpoint): world.checkpoint()} {
					if err := os.WriteFile(path, data, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			whale(t, "init", "--root", root.url, initFile).mustCode(t, exitOK, "initialized run "+name)
			e, err := spec.Load(initFile)
			if err != nil {
				t.Fatal(err)
			}
			text, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			paths := map[string]string{} // path → where it is named
			for _, m := range repoPathRE.FindAllStringSubmatch(string(text), -1) {
				paths[strings.TrimRight(m[1], ".")] = "the text"
			}
			for field, cmd := range map[string]string{
				"finetune.command": e.Finetune.Command, "finetune.reload_command": e.Finetune.ReloadCommand,
				"harness.agent.command": e.Harness.Agent.Command,
			} {
				for _, p := range commandPaths(cmd) {
					paths[p] = field
				}
			}
			for p, where := range paths {
				if _, err := os.Stat(filepath.Join(repoRoot, p)); err != nil {
					t.Errorf("%s names %s, which is not in the repository: %v", where, p, err)
				}
			}
			if strings.Contains(e.Finetune.ReloadCommand, "jobs/vllm/reload.sh") {
				env := e.Finetune.Env
				if env["WHALE_VLLM_STATE"] == "" {
					t.Error("finetune.env has no WHALE_VLLM_STATE, which jobs/vllm/reload.sh needs")
				}
				if got, want := strings.Fields(env["WHALE_VLLM_ENDPOINTS"]), e.Model.Endpoints; !slices.Equal(got, want) {
					t.Errorf("finetune.env WHALE_VLLM_ENDPOINTS %q, want model.endpoints %q", got, want)
				}
			}
			if !isDemo { // a demo's checkpoint is written next to it
				if c := e.Model.Checkpoint; filepath.IsAbs(c) && !strings.HasPrefix(c, "/models/") {
					t.Errorf("model.checkpoint %s: an absolute path of an example is a user path under /models/", c)
				}
				if len(paths) == 0 {
					t.Error("names no repository file: the trainer should be jobs/trainers/train_sft.py")
				}
				checkPaperSettings(t, e)
			}
		})
	}
}

package slurm

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

func TestRenderDirectives(t *testing.T) {
	for _, tc := range []struct {
		name string
		tmpl string
		spec Spec
		want []string
	}{
		{"minimal stage", TemplateStage, Spec{Name: "whale-demo-r001-w01-filter", Command: []string{"whale", "step", "demo"}},
			[]string{"--job-name=whale-demo-r001-w01-filter", "--no-requeue"}},
		{"every resource", TemplateStage, Spec{
			Name: "s", Command: []string{"true"}, Partition: "gpu", Account: "proj-1", QOS: "high",
			CPUsPerTask: 8, Mem: "64G", GPUs: 4, GPUType: "a100", Time: 90*time.Minute + 1,
			Output: "/logs/%x-%j.out", Error: "/logs/%x-%j.err", Chdir: "/work", Requeue: true,
			Extra: []string{"--constraint=a100", "--exclusive"},
		}, []string{"--job-name=s", "--partition=gpu", "--account=proj-1", "--qos=high", "--time=01:30:01",
			"--cpus-per-task=8", "--mem=64G", "--gres=gpu:a100:4", "--output=/logs/%x-%j.out", "--error=/logs/%x-%j.err",
			"--chdir=/work", "--requeue", "--open-mode=append", "--constraint=a100", "--exclusive"}},
		{"array", TemplateArray, Spec{Name: "r", Command: []string{"whale"}, Shards: 4},
			[]string{"--job-name=r", "--array=0-3", "--no-requeue"}},
		{"throttled array", TemplateArray, Spec{Name: "r", Command: []string{"whale"}, Shards: 16, MaxParallel: 2},
			[]string{"--job-name=r", "--array=0-15%2", "--no-requeue"}},
		{"commit after array", TemplateCommit, Spec{Name: "c", Command: []string{"whale"}, AfterOK: []string{"17", "18_2"}},
			[]string{"--job-name=c", "--dependency=afterok:17:18_2", "--kill-on-invalid-dep=yes", "--no-requeue"}},
		{"keep on invalid dependency", TemplateCommit, Spec{Name: "c", Command: []string{"whale"}, AfterOK: []string{"17"}, KeepOnInvalidDep: true},
			[]string{"--job-name=c", "--dependency=afterok:17", "--no-requeue"}},
		{"trainer", TemplateTrainer, Spec{Name: "ft", Command: []string{"whale"}, GPUs: 8, Time: 50 * time.Hour},
			[]string{"--job-name=ft", "--time=2-02:00:00", "--gres=gpu:8", "--no-requeue"}},
		{"vllm rollout", TemplateVLLMRollout, Spec{Name: "v", Command: []string{"whale"}, Shards: 2, GPUs: 1, VLLM: &VLLM{Model: "Qwen/Qwen3-4B"}},
			[]string{"--job-name=v", "--gres=gpu:1", "--array=0-1", "--no-requeue"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script, err := DefaultRenderer().Render(tc.tmpl, tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if got := Directives(script); !slices.Equal(got, tc.want) {
				t.Errorf("directives\n got %q\nwant %q\nscript:\n%s", got, tc.want, script)
			}
			if !strings.HasPrefix(script, "#!/bin/bash\n") {
				t.Errorf("script does not start with #!/bin/bash:\n%s", script)
			}
			bashSyntax(t, script)
		})
	}
}

// bashSyntax fails the test when bash cannot parse script.
func bashSyntax(t *testing.T, script string) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash to check the script's syntax")
	}
	cmd := exec.Command(bash, "-n")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("bash -n: %v: %s\n%s", err, out, script)
	}
}

func TestRenderRejects(t *testing.T) {
	ok := Spec{Name: "n", Command: []string{"true"}}
	with := func(f func(*Spec)) Spec { s := ok; f(&s); return s }
	for _, tc := range []struct {
		name string
		tmpl string
		spec Spec
		want string
	}{
		{"empty name", TemplateStage, with(func(s *Spec) { s.Name = "" }), "name"},
		{"name with space", TemplateStage, with(func(s *Spec) { s.Name = "a b" }), "name"},
		{"name with newline", TemplateStage, with(func(s *Spec) { s.Name = "a\n#SBATCH --x" }), "name"},
		{"no command", TemplateStage, with(func(s *Spec) { s.Command = nil }), "no command"},
		{"partition injection", TemplateStage, with(func(s *Spec) { s.Partition = "gpu\n#SBATCH --exclusive" }), "partition"},
		{"bad mem", TemplateStage, with(func(s *Spec) { s.Mem = "lots" }), "mem"},
		{"negative time", TemplateStage, with(func(s *Spec) { s.Time = -time.Second }), "time"},
		{"space in output", TemplateStage, with(func(s *Spec) { s.Output = "/my logs/x" }), "output"},
		{"gpu type without gpus", TemplateStage, with(func(s *Spec) { s.GPUType = "a100" }), "gpu type"},
		{"bad dependency", TemplateCommit, with(func(s *Spec) { s.AfterOK = []string{"12;rm"} }), "dependency"},
		{"extra without dash", TemplateStage, with(func(s *Spec) { s.Extra = []string{"exclusive"} }), "extra"},
		{"extra with newline", TemplateStage, with(func(s *Spec) { s.Extra = []string{"--a\necho"} }), "extra"},
		{"env name", TemplateStage, with(func(s *Spec) { s.Env = map[string]string{"A-B": "x"} }), "environment variable name"},
		{"secret in env", TemplateStage, with(func(s *Spec) { s.Env = map[string]string{"AWS_SECRET_ACCESS_KEY": "x"} }), "credential"},
		{"token in env", TemplateStage, with(func(s *Spec) { s.Env = map[string]string{"HF_TOKEN": "x"} }), "credential"},
		{"prologue newline", TemplateStage, with(func(s *Spec) { s.Prologue = []string{"a\nb"} }), "prologue"},
		{"newline in argument", TemplateStage, with(func(s *Spec) { s.Command = []string{"echo", "a\nb"} }), "newline"},
		{"shard outside array", TemplateStage, with(func(s *Spec) { s.Command = []string{"whale", "--shard={shard}"} }), "outside an array"},
		{"array without shards", TemplateArray, ok, "Shards"},
		{"stage with shards", TemplateStage, with(func(s *Spec) { s.Shards = 2 }), "Shards"},
		{"throttle without array", TemplateStage, with(func(s *Spec) { s.MaxParallel = 2 }), "max parallel"},
		{"trainer without gpus", TemplateTrainer, ok, "GPUs"},
		{"vllm without model", TemplateVLLMRollout, with(func(s *Spec) { s.Shards = 1 }), "VLLM.Model"},
		{"vllm on stage", TemplateStage, with(func(s *Spec) { s.VLLM = &VLLM{Model: "m"} }), "starts no server"},
		{"vllm port", TemplateVLLMRollout, with(func(s *Spec) { s.Shards = 1; s.VLLM = &VLLM{Model: "m", Port: 80} }), "port"},
		{"unknown template", "nope.sbatch.tmpl", ok, "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DefaultRenderer().Render(tc.tmpl, tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Render = %v, want an error mentioning %q", err, tc.want)
			}
			if tc.tmpl != "nope.sbatch.tmpl" && !errors.Is(err, errSpec) {
				t.Errorf("error %v does not wrap errSpec", err)
			}
		})
	}
}

// A URL that would carry a secret into the script is refused wherever
// it is, and the error shows it redacted; configuration stays.
func TestRenderKeepsSecretsOut(t *testing.T) {
	const secret = "LEAKs3cr3t"
	for _, tc := range []struct {
		name string
		tmpl string
		spec Spec
	}{
		{"root argument", TemplateStage, Spec{Name: "n", Command: []string{"whale", "step", "--root", "s3://b?region=r&token=" + secret, "run"}}},
		{"root flag", TemplateStage, Spec{Name: "n", Command: []string{"whale", "--root=s3://b?region=r;token=" + secret}}},
		{"bad escape", TemplateStage, Spec{Name: "n", Command: []string{"whale", "--root", "s3://b?region=r&token=" + secret + "%zz"}}},
		{"user info", TemplateArray, Spec{Name: "n", Shards: 2, Command: []string{"whale", "--root", "s3://k:" + secret + "@b", "--shard={shard}"}}},
		{"endpoint query", TemplateStage, Spec{Name: "n", Command: []string{"whale", "--root", "s3://b?endpoint=http://h:1/%3Ftoken%3D" + secret}}},
		{"env value", TemplateStage, Spec{Name: "n", Command: []string{"true"}, Env: map[string]string{"WHALE_ROOT": "s3://b?sig=" + secret}}},
		{"vllm argument", TemplateVLLMRollout, Spec{Name: "n", Shards: 1, Command: []string{"true"},
			VLLM: &VLLM{Model: "m", Args: []string{"--hub=https://u:" + secret + "@hub.example"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script, err := DefaultRenderer().Render(tc.tmpl, tc.spec)
			if err == nil || !errors.Is(err, errSpec) || !strings.Contains(err.Error(), "through the environment") {
				t.Fatalf("Render = %v, want a refusal", err)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(script, secret) {
				t.Errorf("the secret shows: %v\n%s", err, script)
			}
		})
	}
	root := "s3://b/whale?endpoint=http://127.0.0.1:7070&region=us-east-1&use_path_style=true"
	script, err := DefaultRenderer().Render(TemplateStage, Spec{Name: "n", Command: []string{"whale", "step", "--root", root, "run"},
		Env: map[string]string{"HF_ENDPOINT": "https://hf.example"}})
	if err != nil || !strings.Contains(script, Quote(root)) {
		t.Errorf("a root with configuration only: %v\n%s", err, script)
	}
}

// The command line and the environment survive bash exactly, with
// {shard} replaced by the array task's index.
func TestRenderedScriptRunsInBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash to run the script")
	}
	args := []string{"plain", "with space", "it's", `"double"`, "$HOME", "`date`", "a;b|c&d", "", "--shard={shard}", "{shard}x{shard}", "ünï"}
	script, err := DefaultRenderer().Render(TemplateArray, Spec{
		Name:     "t",
		Command:  append([]string{"printf", `%s\n`}, args...),
		Env:      map[string]string{"WHALE_X": "a 'quoted' $value"},
		Shards:   8,
		Prologue: []string{`printf '%s\n' "$WHALE_X"`},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "job.sh")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, path)
	cmd.Env = append(os.Environ(), "SLURM_ARRAY_TASK_ID=7", "SLURM_JOB_ID=99")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bash %s: %v\n%s", path, err, script)
	}
	want := []string{"a 'quoted' $value", "plain", "with space", "it's", `"double"`, "$HOME", "`date`", "a;b|c&d", "", "--shard=7", "7x7", "ünï", ""}
	if got := strings.Split(string(out), "\n"); !slices.Equal(got, want) {
		t.Errorf("printed\n%q\nwant\n%q\nscript:\n%s", got, want, script)
	}

	// Outside an array the script refuses to run rather than use shard "".
	cmd = exec.Command(bash, path)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "SLURM_ARRAY_TASK_ID=") })
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "not run as a Slurm array task") {
		t.Errorf("array script without SLURM_ARRAY_TASK_ID: %v %s", err, out)
	}
}

func TestQuoteRoundTrips(t *testing.T) {
	for _, s := range []string{"", "a", "a b", "'", "''", `\`, "$(x)", "a=b", "--x=1", "%j", "~", "*", "\t"} {
		got := shellEcho(t, Quote(s))
		if got != s {
			t.Errorf("Quote(%q) = %s reads back as %q", s, Quote(s), got)
		}
	}
}

func shellEcho(t testing.TB, word string) string {
	t.Helper()
	out, err := exec.Command("sh", "-c", "printf '%s' "+word).Output()
	if err != nil {
		t.Fatalf("sh -c printf %s: %v", word, err)
	}
	return string(out)
}

func FuzzQuote(f *testing.F) {
	for _, s := range []string{"", "a b", "it's", "$HOME", "\\'", "x\ty"} {
		f.Add(s)
	}
	if _, err := exec.LookPath("sh"); err != nil {
		f.Skip("no sh")
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.ContainsAny(s, "\x00") || !utf8Valid(s) {
			return
		}
		if got := shellEcho(t, Quote(s)); got != s {
			t.Errorf("Quote(%q) = %s reads back as %q", s, Quote(s), got)
		}
	})
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "") == s }

func TestSlurmDuration(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{time.Second, "00:00:01"},
		{time.Millisecond, "00:00:01"},
		{59 * time.Minute, "00:59:00"},
		{25*time.Hour + 61*time.Second, "1-01:01:01"},
		{72 * time.Hour, "3-00:00:00"},
	} {
		if got := SlurmDuration(tc.d); got != tc.want {
			t.Errorf("SlurmDuration(%s) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestDirectivesStopAtFirstCommand(t *testing.T) {
	script := "#!/bin/bash\n#SBATCH --job-name=a\n\n# comment\n#SBATCH  --array=0-1\n#SBATCHX --no\necho hi\n#SBATCH --late\n"
	if got, want := Directives(script), []string{"--job-name=a", "--array=0-1"}; !slices.Equal(got, want) {
		t.Errorf("Directives = %q, want %q", got, want)
	}
}

// A site's own templates replace the embedded ones.
func TestNewRendererFromSiteTemplates(t *testing.T) {
	fsys := fstest.MapFS{
		"stage.sbatch.tmpl": {Data: []byte("#!/bin/sh\n{{range .Directives}}#SBATCH {{.}}\n{{end}}module load cuda\n{{.Command}}\n")},
	}
	r, err := NewRenderer(fsys)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Render(TemplateStage, Spec{Name: "x", Command: []string{"whale", "step", "my run"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "#!/bin/sh\n#SBATCH --job-name=x\n#SBATCH --no-requeue\nmodule load cuda\nwhale step 'my run'\n"; got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if _, err := NewRenderer(fstest.MapFS{"bad.tmpl": {Data: []byte("{{")}}); err == nil {
		t.Error("a broken template parsed")
	}
	if _, err := r.Render(TemplateStage, Spec{Name: "x"}); err == nil {
		t.Error("rendered a job without a command")
	}
}

// Every embedded template renders with the smallest spec it accepts.
func TestEmbeddedTemplatesRender(t *testing.T) {
	specs := map[string]Spec{
		TemplateStage:       {Name: "a", Command: []string{"true"}},
		TemplateCommit:      {Name: "a", Command: []string{"true"}, AfterOK: []string{"1"}},
		TemplateArray:       {Name: "a", Command: []string{"true"}, Shards: 1},
		TemplateTrainer:     {Name: "a", Command: []string{"true"}, GPUs: 1},
		TemplateVLLMRollout: {Name: "a", Command: []string{"true"}, Shards: 1, VLLM: &VLLM{Model: "m", Args: []string{"--max-model-len", "8192"}}},
	}
	r := DefaultRenderer()
	for _, tmpl := range r.t.Templates() {
		name := tmpl.Name()
		if !strings.HasSuffix(name, ".sbatch.tmpl") {
			continue
		}
		s, ok := specs[name]
		if !ok {
			t.Errorf("template %s has no test spec here: add one", name)
			continue
		}
		script, err := r.Render(name, s)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		bashSyntax(t, script)
	}
}

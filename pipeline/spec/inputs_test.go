package spec

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// localExperiment is an experiment of the built-in model whose
// model.checkpoint is ckpt.
func localExperiment(ckpt string) string {
	return `name: local
domain: demo
schedule: weights-only
data: {train: datasets/t, test: datasets/t}
model: {provider: local, name: tiny, checkpoint: ` + ckpt + `}
budget: {weight_steps: 1}
`
}

// openaiExperiment is minimal with model.checkpoint set to ckpt.
func openaiExperiment(ckpt string) string {
	return strings.Replace(minimal, "  name: m\n", "  name: m\n  checkpoint: "+ckpt+"\n", 1)
}

func writeTemp(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Relative paths are read from the experiment file's directory, whatever
// the working directory; names and URLs are left alone.
func TestLoadResolvesPaths(t *testing.T) {
	dir := t.TempDir()
	writeTemp(t, dir, "pretrained.wlm", "WHALELM1")
	writeTemp(t, dir, "ckpts/hf/config.json", "{}")
	elsewhere := t.TempDir()
	writeTemp(t, elsewhere, "only-here.wlm", "WHALELM1")
	t.Chdir(elsewhere)

	tests := []struct {
		name, src string
		want      string // the checkpoint after Load; "" when an error is wanted
		errs      []string
	}{
		{"relative file", localExperiment("pretrained.wlm"), filepath.Join(dir, "pretrained.wlm"), nil},
		{"dot relative dir", openaiExperiment("./ckpts/hf"), filepath.Join(dir, "ckpts/hf"), nil},
		{"relative dir that exists", openaiExperiment("ckpts/hf"), filepath.Join(dir, "ckpts/hf"), nil},
		{"hub name", openaiExperiment("Qwen/Qwen3-8B"), "Qwen/Qwen3-8B", nil},
		{"name defaults to the model name", minimal, "m", nil},
		{"url", openaiExperiment("hf://Qwen/Qwen3-8B"), "hf://Qwen/Qwen3-8B", nil},
		{"absolute, not on this machine", openaiExperiment("/models/nowhere"), "/models/nowhere", nil},
		{"absolute, cleaned", openaiExperiment(dir + "/ckpts/../pretrained.wlm"), filepath.Join(dir, "pretrained.wlm"), nil},
		{"explicit relative path missing", openaiExperiment("./missing"), "",
			[]string{"experiment.yaml:9:15: field model.checkpoint: " + filepath.Join(dir, "missing") + " does not exist", "experiment file's directory, " + dir}},
		{"local model needs a file", localExperiment("missing.wlm"), "",
			[]string{"experiment.yaml:5:", "field model.checkpoint: " + filepath.Join(dir, "missing.wlm") + " does not exist"}},
		{"relative to the working directory only", localExperiment("only-here.wlm"), "",
			[]string{`field model.checkpoint: "only-here.wlm" is not in the experiment file's directory ` + dir, "working directory " + elsewhere}},
		{"tilde", openaiExperiment("~/models/x"), "", []string{"~ is not expanded"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := writeTemp(t, dir, "e"+string(rune('a'+i))+".yaml", tt.src)
			e, err := Load(p)
			if tt.errs == nil {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				if e.Model.Checkpoint != tt.want {
					t.Errorf("checkpoint %q, want %q", e.Model.Checkpoint, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Load gave checkpoint %q, want an error", e.Model.Checkpoint)
			}
			msg := strings.ReplaceAll(err.Error(), p, "experiment.yaml")
			for _, w := range tt.errs {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
		})
	}

	// Parse has no file: it leaves paths as written.
	if e := mustParse(t, openaiExperiment("ckpts/hf")); e.Model.Checkpoint != "ckpts/hf" {
		t.Errorf("Parse resolved the checkpoint to %q", e.Model.Checkpoint)
	}
}

func TestReadInputs(t *testing.T) {
	dir := t.TempDir()
	small := writeTemp(t, dir, "small.wlm", "WHALELM1 weights")
	large := filepath.Join(dir, "large.bin")
	f, err := os.Create(large)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(CopyLimit + 1); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	f.Close()
	hf := filepath.Join(dir, "hf")
	writeTemp(t, hf, "config.json", `{"hidden_size": 1024}`)
	writeTemp(t, hf, "model.safetensors.index.json", `{"weight_map": {}}`)
	writeTemp(t, hf, "model-00001-of-00001.safetensors", "weights")

	read := func(path string) Input {
		t.Helper()
		e := Defaults()
		e.Model.Checkpoint = path
		ins, data, err := ReadInputs(&e)
		if err != nil {
			t.Fatal(err)
		}
		if len(ins) != 1 {
			t.Fatalf("%s: %d inputs", path, len(ins))
		}
		in := ins[0]
		if in.Field != "model.checkpoint" || in.Path != path || !strings.HasPrefix(in.Digest, "sha256:") {
			t.Errorf("input %+v", in)
		}
		if (in.Kind == InputCopied) != (data[in.Key] != nil) {
			t.Errorf("%s: kind %s, %d bytes to copy", path, in.Kind, len(data[in.Key]))
		}
		return in
	}

	in := read(small)
	if in.Kind != InputCopied || in.Size != 16 || in.Key != "inputs/"+strings.TrimPrefix(in.Digest, "sha256:")+"/small.wlm" {
		t.Errorf("small file: %+v", in)
	}
	in = read(large)
	if in.Kind != InputPinned || in.Size != CopyLimit+1 || in.Key != "" {
		t.Errorf("large file: %+v", in)
	}
	dirIn := read(hf)
	if dirIn.Kind != InputPinned || dirIn.Files != 3 || dirIn.Size != int64(len(`{"hidden_size": 1024}`)+len(`{"weight_map": {}}`)+len("weights")) {
		t.Errorf("directory: %+v", dirIn)
	}

	// No input for what is not a path on this machine.
	for _, ref := range []string{"Qwen/Qwen3-8B", "/models/nowhere", "hf://x/y"} {
		e := Defaults()
		e.Model.Checkpoint = ref
		if ins, _, err := ReadInputs(&e); err != nil || len(ins) != 0 {
			t.Errorf("%s: inputs %v, %v", ref, ins, err)
		}
	}

	// The directory's digest follows its *.json contents and its listing;
	// a weights file rewritten at the same size is not seen (the price of
	// not reading gigabytes: copy what must be checked byte by byte).
	run := &Run{Spec: Defaults(), Inputs: []Input{dirIn}}
	run.Spec.Name = "r"
	if err := run.CheckInputs(); err != nil {
		t.Fatalf("unchanged: %v", err)
	}
	writeTemp(t, hf, "model-00001-of-00001.safetensors", "WEIGHTS")
	if err := run.CheckInputs(); err != nil {
		t.Errorf("same-size weights: %v", err)
	}
	writeTemp(t, hf, "config.json", `{"hidden_size": 2048}`)
	err = run.CheckInputs()
	var ce *InputChangedError
	if !errors.As(err, &ce) || !errors.Is(err, ErrInputChanged) || !errors.Is(err, ErrSpecMismatch) {
		t.Fatalf("changed config: %v", err)
	}
	for _, w := range []string{`run "r"`, "model.checkpoint " + hf, "has changed", dirIn.Digest} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	writeTemp(t, hf, "config.json", `{"hidden_size": 1024}`)
	writeTemp(t, hf, "extra.bin", "x")
	if err := run.CheckInputs(); !errors.Is(err, ErrInputChanged) {
		t.Errorf("added file: %v", err)
	}
}

// A copied input is checked byte for byte; a missing one says where the
// copy is.
func TestCheckInputs(t *testing.T) {
	dir := t.TempDir()
	ckpt := writeTemp(t, dir, "pretrained.wlm", "WHALELM1 weights")
	e, err := Load(writeTemp(t, dir, "e.yaml", localExperiment("pretrained.wlm")))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Freeze(e, "v", time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if r.Inputs, _, err = ReadInputs(&r.Spec); err != nil || len(r.Inputs) != 1 {
		t.Fatalf("inputs %v, %v", r.Inputs, err)
	}
	// run.json keeps them.
	data, err := r.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeRun("run.json", data)
	if err != nil || len(back.Inputs) != 1 || back.Inputs[0] != r.Inputs[0] {
		t.Fatalf("round trip: %v %+v", err, back)
	}
	if err := back.CheckInputs(); err != nil {
		t.Fatal(err)
	}
	if err := back.CheckInputsSame(r.Inputs); err != nil {
		t.Fatal(err)
	}

	writeTemp(t, dir, "pretrained.wlm", "WHALELM1 Weights")
	err = back.CheckInputs()
	if !errors.Is(err, ErrInputChanged) || !strings.Contains(err.Error(), ckpt+" has changed") || !strings.Contains(err.Error(), r.Inputs[0].Key) {
		t.Errorf("changed: %v", err)
	}
	now, _, _ := ReadInputs(&r.Spec)
	if err := back.CheckInputsSame(now); !errors.Is(err, ErrInputChanged) {
		t.Errorf("CheckInputsSame after a change: %v", err)
	}
	// A path this machine does not have is not checked: what reads it
	// fails, naming it; what does not, runs.
	os.Remove(ckpt)
	if err := back.CheckInputs(); err != nil {
		t.Errorf("missing: %v", err)
	}
	if err := back.CheckInputsSame(nil); err != nil {
		t.Errorf("CheckInputsSame without the input: %v", err)
	}
	if u := back.Unchecked(nil); len(u) != 1 || u[0] != r.Inputs[0] {
		t.Errorf("Unchecked = %v", u)
	}
	// A run frozen before inputs were recorded has nothing to check.
	back.Inputs = nil
	if err := back.CheckInputs(); err != nil {
		t.Errorf("no inputs: %v", err)
	}
}

// A run frozen before paths were resolved holds the relative path as
// written; the same file, now resolved, is the same experiment.
func TestCheckSameAtLegacyPaths(t *testing.T) {
	dir := t.TempDir()
	writeTemp(t, dir, "pretrained.wlm", "WHALELM1")
	src := localExperiment("pretrained.wlm")
	old, err := Freeze(mustParse(t, src), "old", time.Unix(0, 0)) // as an older whale froze it
	if err != nil {
		t.Fatal(err)
	}
	if old.Spec.Model.Checkpoint != "pretrained.wlm" {
		t.Fatalf("fixture: %q", old.Spec.Model.Checkpoint)
	}
	now, err := Load(writeTemp(t, dir, "e.yaml", src))
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckSame(old, now); !errors.Is(err, ErrSpecMismatch) {
		t.Errorf("CheckSame without the directory: %v", err)
	}
	if err := CheckSameAt(old, now, dir); err != nil {
		t.Errorf("CheckSameAt: %v", err)
	}
	if got := LegacyPaths(old, now, dir); len(got) != 1 || got[0] != (LegacyPath{Field: "model.checkpoint", Dir: dir}) {
		t.Errorf("LegacyPaths = %v", got)
	}
	// From another directory it is another file.
	if err := CheckSameAt(old, now, t.TempDir()); !errors.Is(err, ErrSpecMismatch) {
		t.Errorf("CheckSameAt from elsewhere: %v", err)
	}
	// Any of the directories given will do: the working directory of
	// init, after the file's.
	other := t.TempDir()
	if err := CheckSameAt(old, now, other, dir); err != nil {
		t.Errorf("CheckSameAt with the directory second: %v", err)
	}
	if got := LegacyPaths(old, now, "", other, dir); len(got) != 1 || got[0].Dir != dir {
		t.Errorf("LegacyPaths = %v", got)
	}
	// A real change is still one.
	now.Seed = 7
	var me *MismatchError
	if err := CheckSameAt(old, now, dir); !errors.As(err, &me) || strings.Join(me.Paths, ",") != "seed" || me.Stored != old.SpecDigest {
		t.Errorf("CheckSameAt with a new seed: %v", err)
	}
	// A run frozen today has nothing legacy.
	cur, err := Freeze(now, "new", time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if got := LegacyPaths(cur, now, dir); len(got) != 0 {
		t.Errorf("LegacyPaths of a new run = %v", got)
	}
}

// A run frozen before paths were resolved by an init run outside the
// experiment file's directory holds a path relative to that working
// directory. Its file, read from there again, is the same experiment:
// as written (the file's directory does not hold the path, the working
// directory does), or rewritten to name the same file relatively to the
// file or absolutely. A new run of the same file is still refused.
func TestReinitLegacyFromWorkingDirectory(t *testing.T) {
	cwd := t.TempDir()
	ckpt := writeTemp(t, cwd, "pretrained.wlm", "WHALELM1")
	expDir := filepath.Join(cwd, "experiments")
	src := localExperiment("pretrained.wlm")
	old, err := Freeze(mustParse(t, src), "old", time.Unix(0, 0)) // as an older whale froze it, from cwd
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(cwd)

	asWritten := writeTemp(t, expDir, "e.yaml", src)
	if _, err := Load(asWritten); err == nil || !strings.Contains(err.Error(), "in the working directory") {
		t.Fatalf("Load of a new run: %v, want the working-directory error", err)
	}
	for name, file := range map[string]string{
		"as written":           asWritten,
		"relative to the file": writeTemp(t, expDir, "up.yaml", localExperiment("../pretrained.wlm")),
		"absolute":             writeTemp(t, expDir, "abs.yaml", localExperiment(ckpt)),
	} {
		t.Run(name, func(t *testing.T) {
			d, err := Read(file)
			if err != nil {
				t.Fatal(err)
			}
			exp, warnings, err := d.Reinit(old, cwd)
			if err != nil || len(warnings) != 0 {
				t.Fatalf("Reinit: %v, warnings %v", err, warnings)
			}
			if exp.Model.Checkpoint != ckpt {
				t.Errorf("checkpoint %q, want %q", exp.Model.Checkpoint, ckpt)
			}
			if got := LegacyPaths(old, exp, d.Dir, cwd); len(got) != 1 || got[0].Dir != cwd {
				t.Errorf("LegacyPaths = %v", got)
			}
			// From another directory, the run's path names another file.
			if _, _, err := d.Reinit(old, t.TempDir()); err == nil {
				t.Error("Reinit from another directory: no error")
			}
		})
	}
	// Another checkpoint is still another experiment.
	writeTemp(t, cwd, "other.wlm", "WHALELM1")
	d, err := Read(writeTemp(t, expDir, "other.yaml", localExperiment("../other.wlm")))
	if err != nil {
		t.Fatal(err)
	}
	var me *MismatchError
	if _, _, err := d.Reinit(old, cwd); !errors.As(err, &me) || strings.Join(me.Paths, ",") != "model.checkpoint" {
		t.Errorf("Reinit with another checkpoint: %v", err)
	}
}

// A run frozen before a check existed is the same experiment as its file,
// which today's checks refuse: Reinit says so with the problems as
// warnings; a changed file with the problem is refused for it, and a new
// run of it is refused by Load and Freeze.
func TestReinitWarnsOfNewChecks(t *testing.T) {
	const secret = "sk-proj-LiteralBearer0123456789"
	for _, tc := range []struct{ name, old, new, field string }{
		{"a new bound", "group_size: 4", "group_size: 4096", "rsft.group_size"},
		{"the secret scan", "command: train.sh", "command: 'curl -H \"Authorization: Bearer " + secret + "\" x; train.sh'", "finetune.command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := minimal + "rsft:\n  group_size: 4\n"
			if strings.Count(base, tc.old) != 1 {
				t.Fatalf("fixture: %q is not once in minimal", tc.old)
			}
			src := strings.Replace(base, tc.old, tc.new, 1)
			dir := t.TempDir()
			file := writeTemp(t, dir, "e.yaml", src)
			d, err := Read(file)
			if err != nil {
				t.Fatal(err)
			}
			problems := d.Problems()
			if len(problems) != 1 || problems[0].Path != tc.field {
				t.Fatalf("problems %v, want one in %s", problems, tc.field)
			}
			// What an older whale froze: the spec without today's check.
			e := d.Exp.Clone()
			digest, err := Digest(e)
			if err != nil {
				t.Fatal(err)
			}
			old := &Run{Spec: *e, SpecDigest: digest, WhaleVersion: "old"}

			exp, warnings, err := d.Reinit(old, dir)
			if err != nil {
				t.Fatalf("Reinit: %v", err)
			}
			if exp == nil || len(warnings) != 1 || warnings[0].Path != tc.field || warnings[0].Line == 0 || strings.Contains(warnings[0].Error(), secret) {
				t.Errorf("warnings %v", warnings)
			}
			// The file changed in another field too: the problem first.
			d2, err := Read(writeTemp(t, dir, "seed.yaml", src+"seed: 9\n"))
			if err != nil {
				t.Fatal(err)
			}
			var l ErrorList
			if _, _, err := d2.Reinit(old, dir); !errors.As(err, &l) || l[0].Path != tc.field {
				t.Errorf("Reinit of a changed file: %v", err)
			}
			// Fixed, it is another spec than the run's.
			d3, err := Read(writeTemp(t, dir, "fixed.yaml", base))
			if err != nil {
				t.Fatal(err)
			}
			if _, _, err := d3.Reinit(old, dir); !errors.Is(err, ErrSpecMismatch) {
				t.Errorf("Reinit of the fixed file: %v", err)
			}
			// A new run is refused.
			if _, err := Load(file); err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Load: %v", err)
			}
			if _, err := Freeze(d.Exp, "v", time.Unix(0, 0)); err == nil {
				t.Error("Freeze took the spec")
			}
		})
	}
}

func TestKeyName(t *testing.T) {
	for in, want := range map[string]string{
		"pretrained.wlm": "pretrained.wlm", "model weights.bin": "model_weights.bin", "..": "input",
		"x.attrs": "input", "é.wlm": "_.wlm",
	} {
		if got := keyName(in); got != want {
			t.Errorf("keyName(%q) = %q, want %q", in, got, want)
		}
	}
}

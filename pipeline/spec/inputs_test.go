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
	if got := LegacyPaths(old, now, dir); len(got) != 1 || got[0] != "model.checkpoint" {
		t.Errorf("LegacyPaths = %v", got)
	}
	// From another directory it is another file.
	if err := CheckSameAt(old, now, t.TempDir()); !errors.Is(err, ErrSpecMismatch) {
		t.Errorf("CheckSameAt from elsewhere: %v", err)
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

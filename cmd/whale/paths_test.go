package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/whalerun/whale/domains/demo"
	"github.com/whalerun/whale/pipeline"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/scheduler/slurm"
)

// smallLocal is a weights-only experiment on the built-in model whose
// checkpoint is the relative path ckpt.
func smallLocal(name, ckpt string) string {
	return fmt.Sprintf(`name: %s
domain: demo
schedule: weights-only
switch: {fixed: {epochs: 0.2}}
data: {train: datasets/demo-train, test: datasets/demo-test}
model: {name: demo-local, checkpoint: %s, max_tokens: 48, concurrency: 16}
rsft: {group_size: 2, batch_size: 8}
budget: {weight_steps: 1}
eval: {k: 1, test_every_phase: false}
`, name, ckpt)
}

// importDemo imports the demo domain's train and test splits into root.
func importDemo(t *testing.T, root string) {
	t.Helper()
	files, err := demo.WriteDatasets(t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".jsonl")
		whale(t, "data", "import", "--root", root, "--domain", "demo", "--name", name, f).mustCode(t, exitOK)
	}
}

// An experiment whose checkpoint is a path relative to the file: init from
// one directory freezes it as an absolute path and copies the file into
// the bucket; the run's steps, and a Slurm job's command, work from any
// other directory; a changed checkpoint is a conflict naming the path.
func TestRunFromAnotherDirectory(t *testing.T) {
	dir := t.TempDir()
	root := "file://" + filepath.Join(dir, "bucket")
	importDemo(t, root)
	expDir := filepath.Join(dir, "experiment")
	if err := os.MkdirAll(expDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(expDir, "pretrained.wlm")
	if err := os.WriteFile(ckpt, demo.PretrainedCheckpoint(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(expDir, "small.yaml"), []byte(smallLocal("small", "pretrained.wlm")), 0o644); err != nil {
		t.Fatal(err)
	}

	// init from the parent directory, naming the file relatively.
	t.Chdir(dir)
	whale(t, "init", "--root", root, filepath.Join("experiment", "small.yaml")).mustCode(t, exitOK,
		"initialized run small", "model.checkpoint "+ckpt+": copied into the bucket at inputs/")

	ctx := context.Background()
	store := openStore(t, root)
	run, err := pipeline.LoadRun(ctx, store, "small")
	if err != nil {
		t.Fatal(err)
	}
	if run.Spec.Model.Checkpoint != ckpt {
		t.Errorf("frozen checkpoint %q, want %q", run.Spec.Model.Checkpoint, ckpt)
	}
	if len(run.Inputs) != 1 {
		t.Fatalf("inputs %+v", run.Inputs)
	}
	in := run.Inputs[0]
	copied, err := store.ReadAll(ctx, in.Key)
	if err != nil || !bytes.Equal(copied, demo.PretrainedCheckpoint()) || in.Kind != spec.InputCopied || in.Path != ckpt ||
		!strings.HasPrefix(in.Key, "inputs/") || in.Size != int64(len(copied)) {
		t.Errorf("input %+v: the bucket holds %d bytes (%v)", in, len(copied), err)
	}
	// Every path the run records is absolute or a bucket key.
	for _, f := range spec.PathFields {
		if v := spec.PathValue(&run.Spec, f); !filepath.IsAbs(v) {
			t.Errorf("%s = %q", f, v)
		}
	}

	// A step from a directory that holds nothing of the experiment.
	t.Chdir(t.TempDir())
	whale(t, "step", "--root", root, "small").mustCode(t, exitOK, "rollout at r001-w01: committed")

	// A Slurm job runs in the directory it was submitted from, or its
	// --chdir: submit from one, run the job's command from another.
	fake := slurm.NewFake()
	old := newScheduler
	newScheduler = func() slurm.Scheduler { return fake }
	t.Cleanup(func() { newScheduler = old })
	whale(t, "submit", "slurm", "--root", root, "--whale", "/opt/whale", "small").mustCode(t, exitOK, "filter at r001-w01")
	if len(fake.Scripts()) != 1 {
		t.Fatalf("%d scripts submitted", len(fake.Scripts()))
	}
	// The job runs `whale step`, then `whale submit slurm` for its
	// successor.
	cmds := jobCommands(t, fake.Scripts()[0])
	if len(cmds) != 2 || cmds[0][1] != "step" || cmds[1][1] != "submit" {
		t.Fatalf("the job runs %q:\n%s", cmds, fake.Scripts()[0])
	}
	t.Chdir(t.TempDir())
	whale(t, cmds[0][1:]...).mustCode(t, exitOK, "filter at r001-w01: committed")
	if err := fake.Finish("1000", "COMPLETED"); err != nil { // as Slurm sees the job end
		t.Fatal(err)
	}
	whale(t, cmds[1][1:]...).mustCode(t, exitOK, "finetune at r001-w01")

	// The rest, with the checkpoint loaded by the finetune stage, from
	// yet another directory.
	t.Chdir(t.TempDir())
	whale(t, "run", "--root", root, "small").mustCode(t, exitOK, "finetune at r001-w01: committed", "run small is done")

	// init again, from the experiment's own directory: nothing to do.
	t.Chdir(expDir)
	whale(t, "init", "--root", root, "small.yaml").mustCode(t, exitOK, "nothing to do")

	// The checkpoint changed: init says so, naming the path and the copy.
	if err := os.WriteFile(ckpt, append(demo.PretrainedCheckpoint(), 0), 0o644); err != nil {
		t.Fatal(err)
	}
	whale(t, "init", "--root", root, "small.yaml").mustCode(t, exitConflict,
		"model.checkpoint "+ckpt+" has changed since init froze it", in.Digest, "the copy made at init is in the bucket at "+in.Key)
	err = run.CheckInputs()
	if code := exitCode(err); code != exitConflict || !strings.Contains(err.Error(), ckpt) {
		t.Errorf("CheckInputs: %v (exit code %d)", err, code)
	}
	// Under a new name it is a new run, with a new copy.
	whale(t, "init", "--root", root, "--name", "small-2", "small.yaml").mustCode(t, exitOK, "initialized run small-2")
	// On a machine without the checkpoint there is nothing to compare.
	if err := os.Remove(ckpt); err != nil {
		t.Fatal(err)
	}
	// (The relative path must exist; the same file with the absolute path
	// is the same experiment.)
	whale(t, "init", "--root", root, "small.yaml").mustCode(t, exitUsage, ckpt+" does not exist")
	abs := writeFile(t, "small.yaml", smallLocal("small", ckpt))
	whale(t, "init", "--root", root, abs).mustCode(t, exitOK, "nothing to do", "model.checkpoint "+ckpt+" is not on this machine")
	if err := run.CheckInputs(); err != nil {
		t.Errorf("CheckInputs without the file: %v", err)
	}
}

// A run initialized by a whale that kept relative paths still inits from
// its file without a conflict, and is told what it depends on.
func TestInitLegacyRelativePath(t *testing.T) {
	dir := t.TempDir()
	root := "file://" + filepath.Join(dir, "bucket")
	expDir := filepath.Join(dir, "experiment")
	if err := os.MkdirAll(expDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(expDir, "pretrained.wlm"), demo.PretrainedCheckpoint(), 0o644); err != nil {
		t.Fatal(err)
	}
	src := smallLocal("legacy", "pretrained.wlm")
	expFile := filepath.Join(expDir, "legacy.yaml")
	if err := os.WriteFile(expFile, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	// What an older whale froze: the path as written, no inputs.
	exp, err := spec.Parse("legacy.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	old, err := spec.Freeze(exp, "v0.old", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := old.Encode()
	if err != nil {
		t.Fatal(err)
	}
	store := openStore(t, root)
	if err := store.WriteAll(context.Background(), runKey("legacy"), raw); err != nil {
		t.Fatal(err)
	}

	t.Chdir(dir)
	whale(t, "init", "--root", root, expFile).mustCode(t, exitOK, "nothing to do",
		`keeps model.checkpoint as the relative path "pretrained.wlm"`, "start its runs from "+expDir,
		"records no digest of its inputs")
	if again, _ := store.ReadAll(context.Background(), runKey("legacy")); !bytes.Equal(again, raw) {
		t.Error("run.json was rewritten")
	}
	// Another checkpoint, or any other change, is still a conflict.
	other := filepath.Join(expDir, "other.yaml")
	if err := os.WriteFile(other, []byte(strings.Replace(src, "pretrained.wlm", "legacy.yaml", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	whale(t, "init", "--root", root, other).mustCode(t, exitConflict, "model.checkpoint")
}

// jobCommands returns the words of the lines of a job script that run
// /opt/whale, in order.
func jobCommands(t *testing.T, script string) [][]string {
	t.Helper()
	var cmds [][]string
	for line := range strings.SplitSeq(script, "\n") {
		words, err := shellWords(strings.TrimPrefix(line, "exec "))
		if err != nil {
			t.Fatalf("%v in %q", err, line)
		}
		if len(words) > 1 && words[0] == "/opt/whale" {
			cmds = append(cmds, words)
		}
	}
	return cmds
}

// shellWords splits a command line of plain, single-quoted and
// double-quoted words, as the templates write them.
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	in := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == ' ' || c == '\t':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated '")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			in = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated \"")
			}
			in = true
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			in = true
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}

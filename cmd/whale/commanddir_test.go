package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/whalerun/whale/models/modeltest"
)

// The trainer command names a script by a path relative to the directory
// `whale init` ran in; the run, started from anywhere else, runs it
// there.
func TestCommandsRunWhereInitRan(t *testing.T) {
	dir := t.TempDir()
	root := "file://" + filepath.Join(dir, "bucket")
	srv := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: `\boxed{1}`}))
	var tasks strings.Builder
	for i := range 4 {
		fmt.Fprintf(&tasks, `{"id": "t%d", "question": "What is %d + 1?", "answer": "%d"}`+"\n", i, 0, 1)
	}
	data := writeFile(t, "sums.jsonl", tasks.String())
	project := filepath.Join(dir, "project")
	if err := os.MkdirAll(filepath.Join(project, "scripts"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\npwd > \"$WHALE_OUTPUT_DIR/ran-in\"\nwc -l < \"$WHALE_SFT_JSONL\" > \"$WHALE_OUTPUT_DIR/model.bin\"\n"
	if err := os.WriteFile(filepath.Join(project, "scripts", "train.sh"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	exp := filepath.Join(project, "sums.yaml")
	if err := os.WriteFile(exp, []byte(fmt.Sprintf(`name: sums
domain: math
schedule: weights-only
data: {train: datasets/sums, test: datasets/sums-test}
model: {name: fake-model, endpoints: [%q], concurrency: 2}
rsft: {group_size: 2, batch_size: 2}
switch: {fixed: {epochs: 1}}
finetune: {command: 'sh scripts/train.sh', reload: none}
budget: {weight_steps: 1}
eval: {k: 1}
`, srv.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(project)
	whale(t, "data", "import", "--root", root, "--domain", "math", data).mustCode(t, exitOK)
	importSumsTest(t, root)
	whale(t, "init", "--root", root, "sums.yaml").mustCode(t, exitOK)

	t.Chdir(t.TempDir())
	whale(t, "run", "--root", root, "sums").mustCode(t, exitOK, "finetune at r001-w01: committed", "trained=true", "run sums is done")
	// The trainer's output files are stored by content: find the one
	// holding the directory it ran in.
	found := false
	stage := filepath.Join(dir, "bucket", "runs", "sums", "stages", "r001-w01-finetune")
	files, _ := filepath.Glob(filepath.Join(stage, "checkpoint_files-*"))
	for _, f := range files {
		if b, _ := os.ReadFile(f); strings.TrimSpace(string(b)) == project {
			found = true
		}
	}
	if !found {
		t.Fatalf("no file of the trainer's output says it ran in %s (%d files)", project, len(files))
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/whalerun/whale/domains/demo"
	"github.com/whalerun/whale/report"
)

// whale report on a run made by the command line: data import, init and
// run of a small weights-only experiment on the built-in model, then the
// report in a new folder; the usage errors name what to fix.
func TestReportCommand(t *testing.T) {
	dir := t.TempDir()
	root := "file://" + filepath.Join(dir, "bucket")
	files, err := demo.WriteDatasets(filepath.Join(dir, "inputs"), 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".jsonl")
		whale(t, "data", "import", "--root", root, "--domain", "demo", "--name", name, f).mustCode(t, exitOK)
	}
	ckpt, err := filepath.Abs("../../domains/demo/testdata/pretrained.wlm")
	if err != nil {
		t.Fatal(err)
	}
	exp := writeFile(t, "small.yaml", fmt.Sprintf(`name: small
description: a <small> run
domain: demo
schedule: weights-only
switch: {fixed: {epochs: 0.2}}
data: {train: datasets/demo-train, search: datasets/demo-search, test: datasets/demo-test}
model: {name: demo-local, checkpoint: %q, max_tokens: 48, concurrency: 16}
rsft: {group_size: 2, batch_size: 16}
budget: {rollouts: 64}
eval: {k: 1, test_every_phase: true}
`, ckpt))
	whale(t, "init", "--root", root, exp).mustCode(t, exitOK)
	whale(t, "run", "--root", root, "small").mustCode(t, exitOK, "run small is done")

	out := filepath.Join(dir, "out", "rep")
	res := whale(t, "report", "--root", root, "small", "--out", out)
	res.mustCode(t, exitOK)
	index := filepath.Join(out, report.IndexName)
	if strings.TrimSpace(res.stdout) != index {
		t.Errorf("report printed %q, want the path of index.html %q", res.stdout, index)
	}
	html, err := os.ReadFile(index)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Run small", "weights-only", "a &lt;small&gt; run", `src="accuracy.png"`, `src="timeline.png"`, `src="acceptance.png"`} {
		if !strings.Contains(string(html), want) {
			t.Errorf("index.html lacks %q", want)
		}
	}
	raw, err := os.ReadFile(filepath.Join(out, report.DataName))
	if err != nil {
		t.Fatal(err)
	}
	var d report.Data
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Runs) != 1 || d.Runs[0].State != report.StateDone || d.Runs[0].Rollouts != 64 || d.Runs[0].Final == nil {
		t.Errorf("report.json: %+v", d.Runs)
	}
	if d.Root != root {
		t.Errorf("report.json root %q, want %q", d.Root, root)
	}

	// The default folder is ./report.
	t.Chdir(t.TempDir())
	whale(t, "report", "--root", root, "small").mustCode(t, exitOK, filepath.Join("report", report.IndexName))
	if _, err := os.Stat(filepath.Join("report", report.IndexName)); err != nil {
		t.Error(err)
	}

	whale(t, "report", "--root", root).mustCode(t, exitUsage, "one or more run names")
	whale(t, "report", "--root", root, "small", "nope").mustCode(t, exitUsage, `no run "nope"`, "whale init")
	whale(t, "report", "--root", root, "../etc").mustCode(t, exitUsage, "invalid run name")
	whale(t, "report", "small").mustCode(t, exitUsage, "--root")
}

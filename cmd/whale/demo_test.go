package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/whalerun/whale/domains/demo"
	"github.com/whalerun/whale/pipeline"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/storage"
)

// The quick demo runs all four schedules end to end on the built-in model
// (real sampling, training and harness search, only smaller), writes the
// report, and a second run changes nothing.
func TestDemoQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs four small experiments on the built-in model (about a minute on 2 cores); make test runs it")
	}
	dir := t.TempDir()
	ctx := context.Background()
	var first bytes.Buffer
	if err := runDemo(ctx, demoOptions{Dir: dir, Quick: true}, &first); err != nil {
		t.Fatalf("demo: %v\n%s", err, first.String())
	}
	for _, want := range []string{"demo-whale-fixed", "demo-whale-patience", "demo-weights-only", "demo-harness-only",
		"whale (fixed E=0.2 I=2)", "whale (patience)", "final mean@2", "peak (at)", filepath.Join(dir, "report", "index.html")} {
		if !strings.Contains(first.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, first.String())
		}
	}

	root := "file://" + filepath.Join(dir, "bucket")
	store := openStore(t, root)
	committed := map[string][]string{}
	for _, v := range demoVariants {
		run, err := pipeline.LoadRun(ctx, store, v.name)
		if err != nil {
			t.Fatal(err)
		}
		if run.Spec.Schedule != v.schedule || run.Spec.Switch.Mode != v.mode || run.Spec.Budget.Rollouts != 300 {
			t.Errorf("%s: schedule %s/%s budget %d", v.name, run.Spec.Schedule, run.Spec.Switch.Mode, run.Spec.Budget.Rollouts)
		}
		if run.Spec.Model.Provider != spec.ProviderLocal || run.Spec.Model.Checkpoint != filepath.Join(dir, "inputs", "pretrained.wlm") {
			t.Errorf("%s: model %+v", v.name, run.Spec.Model)
		}
		ms, err := storage.ListCommitted(ctx, store, v.name)
		if err != nil {
			t.Fatal(err)
		}
		stagesSeen := map[string]bool{}
		for _, m := range ms {
			committed[v.name] = append(committed[v.name], m.Dir)
			stagesSeen[m.Stage] = true
		}
		// Every schedule ran what it is made of, and was tested.
		want := map[string][]string{
			"demo-whale-fixed":    {"rollout", "filter", "finetune", "propose", "evaluate"},
			"demo-whale-patience": {"rollout", "filter", "finetune", "propose", "evaluate"},
			"demo-weights-only":   {"rollout", "filter", "finetune", "evaluate"},
			"demo-harness-only":   {"propose", "evaluate"},
		}[v.name]
		for _, s := range want {
			if !stagesSeen[s] {
				t.Errorf("%s committed no %s stage: %v", v.name, s, committed[v.name])
			}
		}
		if v.schedule == spec.ScheduleHarnessOnly && stagesSeen["finetune"] {
			t.Errorf("harness-only trained the model")
		}
		if v.schedule == spec.ScheduleWeightsOnly && stagesSeen["propose"] {
			t.Errorf("weights-only searched harnesses")
		}
	}
	ckpt, err := os.ReadFile(filepath.Join(dir, "inputs", "pretrained.wlm"))
	if err != nil || !bytes.Equal(ckpt, demo.PretrainedCheckpoint()) {
		t.Errorf("the checkpoint written out differs from the embedded one (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "report", "index.html")); err != nil {
		t.Errorf("no report: %v", err)
	}

	// Again, through the command line: every run is done, nothing new is
	// committed.
	res := whale(t, "demo", "--dir", dir, "--quick")
	res.mustCode(t, exitOK)
	for _, v := range demoVariants {
		ms, err := storage.ListCommitted(ctx, store, v.name)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != len(committed[v.name]) {
			t.Errorf("%s: %d stages after the rerun, %d before", v.name, len(ms), len(committed[v.name]))
		}
	}
	if !strings.Contains(res.stdout, "final mean@2") {
		t.Errorf("rerun output lacks the summary:\n%s", res.stdout)
	}
	whale(t, "demo", "--dir", dir, "extra").mustCode(t, exitUsage, "no arguments")
	whale(t, "demo", "--dir", dir, "--budget", "-5").mustCode(t, exitUsage, "--budget")
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/whalerun/whale/pipeline"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/storage"
)

// The quick demo runs all four schedules on two seeds end to end on the
// built-in model (real sampling, training and harness search, only
// smaller) in every world, writes the report, and a second run changes
// nothing.
func TestDemoQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("runs eight small experiments per world on the built-in model (under a minute each on 2 cores); make test runs it")
	}
	for _, world := range demoWorlds {
		t.Run(world.name, func(t *testing.T) { testDemoQuick(t, world) })
	}
}

func testDemoQuick(t *testing.T, world demoWorld) {
	dir := t.TempDir()
	ctx := context.Background()
	var first bytes.Buffer
	seeds := []int64{1, 2}
	if err := runDemo(ctx, demoOptions{Dir: dir, World: world.name, Quick: true, Seeds: seeds}, &first); err != nil {
		t.Fatalf("demo: %v\n%s", err, first.String())
	}
	p := world.prefix
	for _, want := range []string{p + "-whale-fixed-s1", p + "-whale-patience-s2", p + "-weights-only-s1", p + "-harness-only-s2",
		"whale (fixed E=0.2 I=2)", "whale (patience)", "final mean@2", "peak (at)", "peak mean@2", "equal spend",
		filepath.Join(dir, "report", "index.html")} {
		if !strings.Contains(first.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, first.String())
		}
	}

	root := "file://" + filepath.Join(dir, "bucket")
	store := openStore(t, root)
	committed := map[string][]string{}
	for _, v := range demoVariants {
		for _, seed := range seeds {
			name := world.runName(v, seed)
			run, err := pipeline.LoadRun(ctx, store, name)
			if err != nil {
				t.Fatal(err)
			}
			if run.Spec.Schedule != v.schedule || run.Spec.Switch.Mode != v.mode || run.Spec.Budget.Rollouts != 300 || run.Spec.Seed != seed {
				t.Errorf("%s: schedule %s/%s budget %d seed %d", name, run.Spec.Schedule, run.Spec.Switch.Mode, run.Spec.Budget.Rollouts, run.Spec.Seed)
			}
			if run.Spec.Model.Provider != spec.ProviderLocal || filepath.Dir(run.Spec.Model.Checkpoint) != filepath.Join(dir, "inputs") {
				t.Errorf("%s: model %+v", name, run.Spec.Model)
			}
			ms, err := storage.ListCommitted(ctx, store, name)
			if err != nil {
				t.Fatal(err)
			}
			stagesSeen := map[string]bool{}
			for _, m := range ms {
				committed[name] = append(committed[name], m.Dir)
				stagesSeen[m.Stage] = true
			}
			// Every schedule ran what it is made of, and was tested.
			want := map[string][]string{
				"whale-fixed":    {"rollout", "filter", "finetune", "propose", "evaluate"},
				"whale-patience": {"rollout", "filter", "finetune", "propose", "evaluate"},
				"weights-only":   {"rollout", "filter", "finetune", "evaluate"},
				"harness-only":   {"propose", "evaluate"},
			}[v.name]
			for _, s := range want {
				if !stagesSeen[s] {
					t.Errorf("%s committed no %s stage: %v", name, s, committed[name])
				}
			}
			if v.schedule == spec.ScheduleHarnessOnly && stagesSeen["finetune"] {
				t.Errorf("harness-only trained the model")
			}
			if v.schedule == spec.ScheduleWeightsOnly && stagesSeen["propose"] {
				t.Errorf("weights-only searched harnesses")
			}
		}
	}
	checkDemoComparison(t, store, filepath.Join(dir, "report", "report.json"), world, seeds)
	run, err := pipeline.LoadRun(ctx, store, world.runName(demoVariants[0], seeds[0]))
	if err != nil {
		t.Fatal(err)
	}
	ckpt, err := os.ReadFile(run.Spec.Model.Checkpoint)
	if err != nil || !bytes.Equal(ckpt, world.checkpoint()) {
		t.Errorf("the checkpoint written out differs from the embedded one (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "report", "index.html")); err != nil {
		t.Errorf("no report: %v", err)
	}

	// Again, through the command line: every run is done, nothing new is
	// committed.
	res := whale(t, "demo", "--dir", dir, "--world", world.name, "--quick", "--seeds", "1,2")
	res.mustCode(t, exitOK)
	for name, dirs := range committed {
		ms, err := storage.ListCommitted(ctx, store, name)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != len(dirs) {
			t.Errorf("%s: %d stages after the rerun, %d before", name, len(ms), len(dirs))
		}
	}
	if !strings.Contains(res.stdout, "final mean@2") {
		t.Errorf("rerun output lacks the summary:\n%s", res.stdout)
	}
	whale(t, "demo", "--dir", dir, "extra").mustCode(t, exitUsage, "no arguments")
	whale(t, "demo", "--dir", dir, "--budget", "-5").mustCode(t, exitUsage, "--budget")
	whale(t, "demo", "--dir", dir, "--seeds", "0").mustCode(t, exitUsage, "--seeds")
	whale(t, "demo", "--dir", dir, "--seeds", "1,x").mustCode(t, exitUsage, "--seeds")
	whale(t, "demo", "--dir", dir, "--world", "nope").mustCode(t, exitUsage, "--world")
}

func TestParseSeeds(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []int64
		err  string
	}{
		{"", []int64{1, 2, 3}, ""},
		{"3", []int64{1, 2, 3}, ""},
		{"1", []int64{1}, ""},
		{"1,4,9", []int64{1, 4, 9}, ""},
		{"7,", []int64{7}, ""},
		{" 2 , 5 ", []int64{2, 5}, ""},
		{"0", nil, "want a count"},
		{"x", nil, "want a count"},
		{"1,1", nil, "listed twice"},
		{"1,-2", nil, "not a seed"},
		{",", nil, "no seed"},
	} {
		got, err := parseSeeds(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("parseSeeds(%q): err %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("parseSeeds(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

// demoTest is one test evaluation as the files show it.
type demoTest struct {
	x    int64 // budgeted rollouts committed before it
	mean float64
}

// demoFromFiles reads a run's committed stages in commit order and
// recomputes, from the rollout rows of each Parquet file, the budgeted
// rollouts (rollout stages and search evaluations) and each test's
// mean@k (reward per task averaged over its samples, then over tasks).
func demoFromFiles(t *testing.T, s *storage.Store, run string) (spent int64, tests []demoTest) {
	t.Helper()
	ctx := context.Background()
	ms, err := storage.ListCommitted(ctx, s, run)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(ms, func(a, b *storage.Manifest) int { return a.Finished.Compare(b.Finished) })
	for _, m := range ms {
		isTest := strings.HasSuffix(m.Position, "t")
		if m.Stage != pipeline.StageRollout && m.Stage != pipeline.StageEvaluate {
			continue
		}
		sum, n := map[string]float64{}, map[string]float64{}
		var rows int64
		for _, f := range m.Table("rollouts") {
			ra, err := m.OpenFile(ctx, s, f)
			if err != nil {
				t.Fatal(err)
			}
			if err := schemas.ReadRows(ctx, ra, ra.Size(), func(r schemas.Rollout) error {
				rows++
				sum[r.TaskID] += r.Reward
				n[r.TaskID]++
				return nil
			}); err != nil {
				t.Fatalf("%s: %v", m.Dir, err)
			}
		}
		if !isTest {
			spent += rows
			continue
		}
		var mean float64
		for task := range n {
			mean += sum[task] / n[task]
		}
		tests = append(tests, demoTest{x: spent, mean: mean / float64(len(n))})
	}
	return spent, tests
}

// checkDemoComparison checks report.json's comparison against numbers
// recomputed here from the Parquet files: per schedule, the mean, sample
// standard deviation, minimum and maximum over seeds of the peak and
// final test mean@k, of the rollouts spent and of the score in force at
// the smallest spend any run reached.
func checkDemoComparison(t *testing.T, s *storage.Store, path string, world demoWorld, seeds []int64) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type stat struct {
		N                   int
		Values              []float64
		Mean, Std, Min, Max float64
	}
	var d struct {
		Comparison struct {
			EqualSpend int64 `json:"equal_spend"`
			Note       string
			Groups     []struct {
				Name         string
				Runs         []string
				Seeds        []int64
				Peak         stat
				Final        stat
				Rollouts     stat
				AtEqualSpend stat `json:"at_equal_spend"`
			}
		}
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	c := d.Comparison
	if len(c.Groups) != len(demoVariants) {
		t.Fatalf("report.json compares %d schedules, want %d", len(c.Groups), len(demoVariants))
	}
	type fromFiles struct {
		spent int64
		tests []demoTest
	}
	runs := map[string]fromFiles{}
	equal := int64(-1)
	for _, v := range demoVariants {
		for _, seed := range seeds {
			name := world.runName(v, seed)
			spent, tests := demoFromFiles(t, s, name)
			if len(tests) == 0 {
				t.Fatalf("%s: %d tests in the files", name, len(tests))
			}
			runs[name] = fromFiles{spent, tests}
			if equal < 0 || spent < equal {
				equal = spent
			}
		}
	}
	if c.EqualSpend != equal {
		t.Errorf("equal spend %d, the files give %d (the smallest spend of any run)", c.EqualSpend, equal)
	}
	if !strings.Contains(c.Note, fmt.Sprintf("at %d rollouts", equal)) {
		t.Errorf("the note does not say where the runs are compared at equal spend: %q", c.Note)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	check := func(group, what string, got stat, all []float64) {
		// A run with no test by the equal spend has no value there.
		vals := slices.DeleteFunc(slices.Clone(all), math.IsNaN)
		if len(vals) == 0 {
			if got.N != 0 {
				t.Errorf("%s %s: report %+v; the files give no value", group, what, got)
			}
			return
		}
		var mean float64
		for _, v := range vals {
			mean += v
		}
		mean /= float64(len(vals))
		var ss float64
		for _, v := range vals {
			ss += (v - mean) * (v - mean)
		}
		std := 0.0
		if len(vals) > 1 {
			std = math.Sqrt(ss / float64(len(vals)-1))
		}
		if got.N != len(vals) || !near(got.Mean, mean) || !near(got.Std, std) || !near(got.Min, slices.Min(vals)) || !near(got.Max, slices.Max(vals)) {
			t.Errorf("%s %s: report %+v; the files give %v: mean %v std %v min %v max %v", group, what, got, vals, mean, std, slices.Min(vals), slices.Max(vals))
		}
	}
	for i, v := range demoVariants {
		g := c.Groups[i]
		if want := world.prefix + "-" + v.name; g.Name != want || !slices.Equal(g.Seeds, seeds) {
			t.Errorf("group %d: %s seeds %v, want %s seeds %v", i, g.Name, g.Seeds, want, seeds)
		}
		var peak, final, spent, at []float64
		for _, seed := range seeds {
			r := runs[world.runName(v, seed)]
			p, inForce := math.Inf(-1), math.NaN()
			for _, tp := range r.tests {
				p = max(p, tp.mean)
				if tp.x <= equal {
					inForce = tp.mean
				}
			}
			peak = append(peak, p)
			final = append(final, r.tests[len(r.tests)-1].mean)
			spent = append(spent, float64(r.spent))
			at = append(at, inForce)
		}
		check(v.name, "peak", g.Peak, peak)
		check(v.name, "final", g.Final, final)
		check(v.name, "rollouts", g.Rollouts, spent)
		check(v.name, "at equal spend", g.AtEqualSpend, at)
	}
}

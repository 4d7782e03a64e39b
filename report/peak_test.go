package report

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/whalerun/whale/pipeline"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/storage"
)

// build on hand-made tests: the peak is the best mean@k, the first test
// to reach it; the final test is the newest.
func TestBuildPeak(t *testing.T) {
	cases := []struct {
		name      string
		means     []float64 // of r000-t, r001-wt, r001-ht, r002-wt in turn
		wantPeak  string
		wantFinal string
	}{
		{"peak in the middle", []float64{0.2, 0.6, 0.4}, "r001-wt", "r001-ht"},
		{"tie goes to the first", []float64{0.5, 0.3, 0.5, 0.5}, "r000-t", "r002-wt"},
		{"final is the peak", []float64{0.1, 0.2, 0.3}, "r001-ht", "r001-ht"},
		{"one test", []float64{0.7}, "r000-t", "r000-t"},
	}
	positions := []string{"r000-t", "r001-wt", "r001-ht", "r002-wt"}
	sections := map[string]string{"r000-t": TestInitial, "r001-wt": TestWeight, "r001-ht": TestHarness, "r002-wt": TestWeight}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var units []pipeline.Unit
			for i, m := range c.means {
				units = append(units, unit(t, positions[i], i, 10*i, evaluated(t, "test", 4, "m", cand{h0, "h0", m, 2, 3})))
			}
			r, err := build("r", frozen(t, "whale", ""), units)
			if err != nil {
				t.Fatal(err)
			}
			if r.Peak == nil || r.Final == nil {
				t.Fatalf("peak %v final %v", r.Peak, r.Final)
			}
			if r.Peak.Position != c.wantPeak || r.Final.Position != c.wantFinal {
				t.Errorf("peak at %s, final at %s; want %s and %s", r.Peak.Position, r.Final.Position, c.wantPeak, c.wantFinal)
			}
			want := c.means[indexOf(positions, c.wantPeak)]
			if got := r.Peak.MeanAtK; got != want {
				t.Errorf("peak mean@k %v, want %v", got, want)
			}
			if r.Peak.Round != int(c.wantPeak[3]-'0') || r.Peak.Section != sections[c.wantPeak] {
				t.Errorf("peak %+v, want round %c section %s", r.Peak, c.wantPeak[3], sections[c.wantPeak])
			}
		})
	}
	r, err := build("r", frozen(t, "whale", ""), []pipeline.Unit{unit(t, "r001-w01", 0, 0, rollout(t, 8, 0.5, h0))})
	if err != nil || r.Peak != nil || r.Final != nil {
		t.Errorf("a run without tests: peak %v final %v err %v", r.Peak, r.Final, err)
	}
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}

// testMeanAtK recomputes a test's mean@k from its evaluate stage's
// rollouts Parquet: mean reward per task, then over tasks.
func testMeanAtK(t *testing.T, s *storage.Store, run, pos string) float64 {
	t.Helper()
	ctx := context.Background()
	ms, err := storage.ListCommitted(ctx, s, run)
	if err != nil {
		t.Fatal(err)
	}
	sum, n := map[string]float64{}, map[string]float64{}
	for _, m := range ms {
		if m.Position != pos || m.Stage != pipeline.StageEvaluate {
			continue
		}
		for _, f := range m.Table("rollouts") {
			ra, err := m.OpenFile(ctx, s, f)
			if err != nil {
				t.Fatal(err)
			}
			if err := schemas.ReadRows(ctx, ra, ra.Size(), func(r schemas.Rollout) error {
				sum[r.TaskID] += r.Reward
				n[r.TaskID]++
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(n) == 0 {
		t.Fatalf("%s %s: no evaluate rollouts", run, pos)
	}
	var mean float64
	for task := range n {
		mean += sum[task] / n[task]
	}
	return mean / float64(len(n))
}

// On the demo runs, every test's mean@k, the final one and the peak agree
// with the evaluation Parquet, and the page's summary table shows the peak
// and where it was reached.
func TestPeakDemoRuns(t *testing.T) {
	d, s := collectDemo(t)
	for _, r := range d.Runs {
		if len(r.Tests) == 0 {
			if r.Peak != nil {
				t.Errorf("%s: a peak %+v without tests", r.Name, r.Peak)
			}
			continue
		}
		best, bestAt := math.Inf(-1), ""
		for _, tp := range r.Tests {
			m := testMeanAtK(t, s, r.Name, tp.Position)
			if math.Abs(m-tp.MeanAtK) > 1e-9 {
				t.Errorf("%s %s: mean@k %v, the Parquet gives %v", r.Name, tp.Position, tp.MeanAtK, m)
			}
			if m > best+1e-12 {
				best, bestAt = m, tp.Position
			}
		}
		last := r.Tests[len(r.Tests)-1]
		if r.Final == nil || r.Final.Position != last.Position {
			t.Errorf("%s: final %+v, want the newest test %s", r.Name, r.Final, last.Position)
		}
		if r.Peak == nil || r.Peak.Position != bestAt || math.Abs(r.Peak.MeanAtK-best) > 1e-9 {
			t.Errorf("%s: peak %+v, the Parquet's best is %v at %s", r.Name, r.Peak, best, bestAt)
		}
	}
	dir := filepath.Join(t.TempDir(), "out")
	paths, err := Write(context.Background(), d, dir)
	if err != nil {
		t.Fatal(err)
	}
	html, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	summary, _, _ := strings.Cut(string(html), `<section id="plots">`)
	if !strings.Contains(summary, "peak test mean@k") {
		t.Error("the summary table has no peak column")
	}
	for _, r := range d.Runs {
		if r.Peak == nil {
			continue
		}
		want := fmt.Sprintf("%.3f <span class=\"note\">(k=%d)</span></td><td>%s <span class=\"note\">(round %d, %s test, evaluate)",
			r.Peak.MeanAtK, r.Peak.K, r.Peak.Position, r.Peak.Round, r.Peak.Section)
		if !strings.Contains(summary, want) {
			t.Errorf("%s: the summary table does not show the peak %q", r.Name, want)
		}
	}
}

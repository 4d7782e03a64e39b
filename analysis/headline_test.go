package analysis

import (
	"context"
	"log/slog"
	"math"
	"strings"
	"testing"

	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

// testRows are the rows of a test evaluation at pos: per task, its sample
// rewards.
func testRows(pos string, rewards map[string][]float64) []schemas.Rollout {
	var out []schemas.Rollout
	for task, rs := range rewards {
		for i, r := range rs {
			row := ep(pos, h1, task, r, r == 1, 1, 10, 5, "")
			row.Sample = int32(i)
			out = append(out, row)
		}
	}
	return out
}

// parquetMeanAtK recomputes a position's mean@k from the committed Parquet
// of run, without package analysis: mean reward per task, then over tasks.
func parquetMeanAtK(t *testing.T, s *storage.Store, run, pos string) float64 {
	t.Helper()
	ctx := context.Background()
	ms, err := storage.ListCommitted(ctx, s, run)
	if err != nil {
		t.Fatal(err)
	}
	sum, n := map[string]float64{}, map[string]float64{}
	for _, m := range ms {
		if m.Position != pos {
			continue
		}
		for _, f := range m.Table(RolloutsTable) {
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
		t.Fatalf("no rows at %s", pos)
	}
	var mean float64
	for task := range n {
		mean += sum[task] / n[task]
	}
	return mean / float64(len(n))
}

func TestHeadlinePeakAndFinal(t *testing.T) {
	low := map[string][]float64{"a": {0, 0, 1, 0}, "b": {0, 0, 0, 0}}
	mid := map[string][]float64{"a": {1, 0, 1, 0}, "b": {0, 0.5, 0, 0}}
	high := map[string][]float64{"a": {1, 1, 1, 0}, "b": {1, 0, 0.5, 0}}
	// A weight step scores better than any test: it is not a test.
	train := map[string][]float64{"a": {1, 1, 1, 1}, "b": {1, 1, 1, 1}}
	cases := []struct {
		name      string
		tests     [][2]any // position, rewards, in the order committed
		by        []string
		wantPeak  string
		wantFinal string
	}{
		{"peak before the end", [][2]any{{"r000-t", low}, {"r001-wt", high}, {"r001-ht", mid}}, nil, "r001-wt", "r001-ht"},
		{"committed out of order", [][2]any{{"r001-ht", mid}, {"r000-t", low}, {"r001-wt", high}}, nil, "r001-wt", "r001-ht"},
		{"a tie goes to the first", [][2]any{{"r000-t", high}, {"r001-wt", low}, {"r001-ht", high}}, nil, "r000-t", "r001-ht"},
		{"final is the peak", [][2]any{{"r000-t", low}, {"r001-wt", mid}, {"r001-ht", high}}, nil, "r001-ht", "r001-ht"},
		{"one group", [][2]any{{"r000-t", low}, {"r001-wt", high}, {"r001-ht", mid}}, []string{}, "r001-wt", "r001-ht"},
		{"by harness", [][2]any{{"r000-t", mid}, {"r001-wt", low}, {"r002-wt", high}, {"r002-ht", low}}, []string{DimHarness}, "r002-wt", "r002-ht"},
		{"round 10 after round 9", [][2]any{{"r009-wt", high}, {"r010-wt", low}}, nil, "r009-wt", "r010-wt"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			s, err := storage.Open(ctx, "mem://", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			exec := func(pos string, st stages.Stage) {
				t.Helper()
				if _, err := stages.Execute(ctx, s, stages.Spec{Run: "exp", Position: pos, Seed: 1, Log: slog.New(slog.DiscardHandler)}, st); err != nil {
					t.Fatal(err)
				}
			}
			exec("r001-w01", rolloutStage{"rollout", testRows("r001-w01", train)})
			for _, tc := range c.tests {
				pos := tc[0].(string)
				exec(pos, rolloutStage{"evaluate", testRows(pos, tc[1].(map[string][]float64))})
			}
			a, err := New(Options{By: c.by})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := a.AddRun(ctx, s, "exp", "whale"); err != nil {
				t.Fatal(err)
			}
			r := a.Result()
			if len(r.Headlines) != 1 {
				t.Fatalf("headlines %+v, want one", r.Headlines)
			}
			h := r.Headlines[0]
			if h.Run != "exp" || h.Tests != len(c.tests) {
				t.Errorf("headline %+v, want run exp with %d tests", h, len(c.tests))
			}
			for _, w := range []struct {
				what string
				got  TestScore
				pos  string
			}{{"peak", h.Peak, c.wantPeak}, {"final", h.Final, c.wantFinal}} {
				want := parquetMeanAtK(t, s, "exp", w.pos)
				if w.got.Position != w.pos || w.got.Round != w.pos[:4] || w.got.Section != SectionTest || w.got.Stage != "evaluate" {
					t.Errorf("%s at %+v, want %s (round %s, test, evaluate)", w.what, w.got, w.pos, w.pos[:4])
				}
				if math.Abs(w.got.MeanAtK-want) > 1e-12 || w.got.Tasks != 2 || w.got.Episodes != 8 || w.got.KMin != 4 {
					t.Errorf("%s %+v, want mean@k %v from the Parquet over 2 tasks", w.what, w.got, want)
				}
			}
			// Every test's score is no better than the peak's.
			for _, tc := range c.tests {
				if m := parquetMeanAtK(t, s, "exp", tc[0].(string)); m > h.Peak.MeanAtK {
					t.Errorf("%s scores %v, above the peak %v", tc[0], m, h.Peak.MeanAtK)
				}
			}
			var b strings.Builder
			if err := r.Write(&b, FormatTable); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"PEAK_AT", c.wantPeak + " (round " + c.wantPeak[:4] + ", test, evaluate)"} {
				if !strings.Contains(b.String(), want) {
					t.Errorf("table does not show %q:\n%s", want, b.String())
				}
			}
		})
	}
}

// A run without a test evaluation has no headline, and a note says so;
// loose files have none either.
func TestHeadlineNone(t *testing.T) {
	ctx := context.Background()
	s, err := storage.Open(ctx, "mem://", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := stages.Execute(ctx, s, stages.Spec{Run: "exp", Position: "r001-w01", Seed: 1, Log: slog.New(slog.DiscardHandler)},
		rolloutStage{"rollout", weightRows()}); err != nil {
		t.Fatal(err)
	}
	a, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.AddRun(ctx, s, "exp", "whale"); err != nil {
		t.Fatal(err)
	}
	r := a.Result()
	if len(r.Headlines) != 0 || !strings.Contains(strings.Join(r.Notes, "\n"), "run exp has no test evaluation yet") {
		t.Errorf("headlines %+v, notes %q", r.Headlines, r.Notes)
	}
	if r := analyse(t, Options{}, fixtureFiles(t)); len(r.Headlines) != 0 {
		t.Errorf("loose files: headlines %+v", r.Headlines)
	}
}

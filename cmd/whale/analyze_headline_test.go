package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/storage"
)

// evalMeanAtK recomputes the mean@k of run's evaluation at pos from its
// committed rollouts Parquet: mean reward per task, then over tasks.
func evalMeanAtK(t *testing.T, s *storage.Store, run, pos string) float64 {
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
		t.Fatalf("no rollouts at %s", pos)
	}
	var mean float64
	for task := range n {
		mean += sum[task] / n[task]
	}
	return mean / float64(len(n))
}

// whale analyze gives each run's final and peak test mean@k, with the
// position it was reached at, in the table, JSON and CSV's notes, whatever
// --by says; the numbers are those of the evaluation Parquet.
func TestAnalyzeHeadline(t *testing.T) {
	forEachRoot(t, func(t *testing.T, r testRoot) {
		store := openStore(t, r.url)
		newRun(t, store, "alt", "whale")
		newRun(t, store, "base", "weights-only")
		// alt: tests r000-t (low), r001-wt (best), r001-ht (middle); a
		// weight step that scores higher than any test.
		commitStage(t, store, "alt", "r000-t", fixedRollouts{"evaluate", concat(episodes(harnessA, "t1", 0, 0, 1, 0), episodes(harnessA, "t2", 0, 0, 0, 0))})
		commitStage(t, store, "alt", "r001-w01", fixedRollouts{"rollout", concat(episodes(harnessA, "t1", 1, 1, 1, 1), episodes(harnessA, "t2", 1, 1, 1, 1))})
		commitStage(t, store, "alt", "r001-wt", fixedRollouts{"evaluate", concat(episodes(harnessA, "t1", 1, 1, 1, 0), episodes(harnessA, "t2", 1, 0, 0.5, 0))})
		commitStage(t, store, "alt", "r001-ht", fixedRollouts{"evaluate", concat(episodes(harnessB, "t1", 1, 0, 1, 0), episodes(harnessB, "t2", 0, 0.5, 0, -1))})
		// base: one test, so final and peak are the same.
		commitStage(t, store, "base", "r001-wt", fixedRollouts{"evaluate", concat(episodes(harnessA, "t1", 1, 0, 0, 0), episodes(harnessA, "t2", 0, 0, 0, 1))})
		want := map[string][2]string{"alt": {"r001-ht", "r001-wt"}, "base": {"r001-wt", "r001-wt"}} // final, peak

		for _, by := range []string{"run,position,stage", "harness", ""} {
			js := whale(t, "analyze", "--root", r.url, "alt", "base", "--by", by, "--format", "json")
			js.mustCode(t, exitOK)
			type score struct {
				Position string  `json:"position"`
				Round    string  `json:"round"`
				Section  string  `json:"section"`
				Stage    string  `json:"stage"`
				MeanAtK  float64 `json:"mean_at_k"`
				Tasks    int     `json:"tasks"`
			}
			var doc struct {
				Headlines []struct {
					Run   string `json:"run"`
					Tests int    `json:"tests"`
					Final score  `json:"final"`
					Peak  score  `json:"peak"`
				} `json:"headlines"`
			}
			if err := json.Unmarshal([]byte(js.stdout), &doc); err != nil {
				t.Fatalf("json: %v\n%s", err, js.stdout)
			}
			if len(doc.Headlines) != 2 || doc.Headlines[0].Run != "alt" || doc.Headlines[1].Run != "base" ||
				doc.Headlines[0].Tests != 3 || doc.Headlines[1].Tests != 1 {
				t.Fatalf("--by %q: headlines %+v", by, doc.Headlines)
			}
			for _, h := range doc.Headlines {
				w := want[h.Run]
				final, peak := h.Final, h.Peak
				if final.Position != w[0] || final.Round != "r001" || final.Section != "test" || final.Stage != "evaluate" || final.Tasks != 2 {
					t.Errorf("--by %q: %s final %+v, want %s", by, h.Run, final, w[0])
				}
				if peak.Position != w[1] || peak.Round != "r001" || peak.Section != "test" || peak.Stage != "evaluate" || peak.Tasks != 2 {
					t.Errorf("--by %q: %s peak %+v, want %s", by, h.Run, peak, w[1])
				}
				if m := evalMeanAtK(t, store, h.Run, w[0]); math.Abs(final.MeanAtK-m) > 1e-12 {
					t.Errorf("%s final mean@k %v, the Parquet gives %v", h.Run, final.MeanAtK, m)
				}
				if m := evalMeanAtK(t, store, h.Run, w[1]); math.Abs(peak.MeanAtK-m) > 1e-12 {
					t.Errorf("%s peak mean@k %v, the Parquet gives %v", h.Run, peak.MeanAtK, m)
				}
			}
		}
		// The peak is the best test: no test of alt scores more.
		best := evalMeanAtK(t, store, "alt", "r001-wt")
		for _, pos := range []string{"r000-t", "r001-ht"} {
			if m := evalMeanAtK(t, store, "alt", pos); m >= best {
				t.Fatalf("fixture: %s scores %v, not below the peak %v", pos, m, best)
			}
		}

		tbl := whale(t, "analyze", "--root", r.url, "alt", "base")
		tbl.mustCode(t, exitOK, "FINAL_AT", "PEAK_AT")
		altFinal, altPeak := evalMeanAtK(t, store, "alt", "r001-ht"), best
		row := regexp.MustCompile(`(?m)^alt\s+3\s+(\S+)\s+r001-ht \(round r001, test, evaluate\)\s+(\S+)\s+r001-wt \(round r001, test, evaluate\)$`).FindStringSubmatch(tbl.stdout)
		if row == nil {
			t.Fatalf("no headline row for alt:\n%s", tbl.stdout)
		}
		if row[1] != fmt.Sprintf("%.3f", altFinal) || row[2] != fmt.Sprintf("%.3f", altPeak) {
			t.Errorf("table final %s peak %s, the Parquet gives %.3f and %.3f", row[1], row[2], altFinal, altPeak)
		}

		csv := whale(t, "analyze", "--root", r.url, "alt", "--format", "csv")
		csv.mustCode(t, exitOK)
		if !strings.Contains(csv.stderr, "note: run alt: final test mean@k") || !strings.Contains(csv.stderr, "peak") ||
			strings.Contains(csv.stdout, "peak") {
			t.Errorf("csv: the headline belongs on stderr:\nstdout %s\nstderr %s", csv.stdout, csv.stderr)
		}
	})
}

package analysis

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
)

// testBy groups the rows of test evaluations for the headline: one group
// per test, whatever Options.By asks for.
var testBy = []string{DimRun, DimPosition, DimStage}

// TestScore is the mean@k of one test evaluation of a run, and where it
// was reached.
type TestScore struct {
	Position string // r002-wt
	Round    string // r002
	Section  string // always SectionTest
	Stage    string // the stage that scored it: evaluate
	MeanAtK  float64
	Tasks    int
	Episodes int
	// KMin and KMax are the smallest and largest sample count per task.
	KMin, KMax int
}

// Headline sums up a run's test curve as the paper reports it: the final
// test's mean@k, and the peak (the best mean@k over all its tests, the
// first one reaching it on a tie) with the position it was reached at.
type Headline struct {
	Run   string
	Tests int // test evaluations scored
	Final TestScore
	Peak  TestScore
}

// addRunTests reads a run's test evaluations a second time, into one
// group per test, so the headline does not depend on Options.By. Only the
// test positions' files are read again: a fraction of a run's rollouts.
func (a *Analyzer) addRunTests(ctx context.Context, run string, files []File) error {
	if !slices.Contains(a.runs, run) {
		a.runs = append(a.runs, run)
	}
	var tests []File
	for _, f := range files {
		if pi := a.position(f.Labels.Position); pi.ok && pi.section == SectionTest {
			tests = append(tests, f)
		}
	}
	if len(tests) == 0 {
		return nil
	}
	if a.tests == nil {
		t, err := New(Options{By: testBy, K: a.k})
		if err != nil {
			return err
		}
		a.tests = t
	}
	return a.tests.AddFiles(ctx, tests)
}

// headlines computes the Headline of every run added with AddRun that has
// a test evaluation, in the order the runs were added; the others get a
// note.
func (a *Analyzer) headlines() ([]Headline, []string) {
	out := []Headline{}
	var notes []string
	perRun := map[string][]TestScore{}
	if a.tests != nil {
		// Groups come sorted by run, then position in the planner's order.
		for _, g := range a.tests.Result().Groups {
			run, pos, stage := g.Key[0], g.Key[1], g.Key[2]
			pi := a.position(pos)
			perRun[run] = append(perRun[run], TestScore{Position: pos, Round: pi.round, Section: pi.section, Stage: stage,
				MeanAtK: g.MeanAtK, Tasks: g.Tasks, Episodes: g.Episodes, KMin: g.KMin, KMax: g.KMax})
		}
	}
	for _, run := range a.runs {
		tests := perRun[run]
		if len(tests) == 0 {
			notes = append(notes, fmt.Sprintf("run %s has no test evaluation yet: no final or peak test mean@k", run))
			continue
		}
		peak := -1
		for i, t := range tests {
			// Strictly better: the first test to reach the best score is
			// where it was reached. A NaN (a verifier's bug) never is.
			if !math.IsNaN(t.MeanAtK) && (peak < 0 || t.MeanAtK > tests[peak].MeanAtK) {
				peak = i
			}
		}
		if peak < 0 {
			peak = len(tests) - 1
		}
		out = append(out, Headline{Run: run, Tests: len(tests), Final: tests[len(tests)-1], Peak: tests[peak]})
	}
	return out, notes
}

// where names a test's position for text: "r002-wt (round r002, test,
// evaluate)".
func (t TestScore) where() string {
	parts := []string{}
	for _, p := range []string{"round " + t.Round, t.Section, t.Stage} {
		if strings.TrimSpace(strings.TrimPrefix(p, "round ")) != "" {
			parts = append(parts, p)
		}
	}
	return fmt.Sprintf("%s (%s)", t.Position, strings.Join(parts, ", "))
}

// Line is the headline in one sentence, for outputs with no room for a
// table (CSV's notes).
func (h Headline) Line() string {
	return fmt.Sprintf("run %s: final test mean@k %.4f at %s; peak %.4f at %s, over %d test evaluation(s)",
		h.Run, h.Final.MeanAtK, h.Final.where(), h.Peak.MeanAtK, h.Peak.where(), h.Tests)
}

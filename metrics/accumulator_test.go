package metrics

import (
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/whalerun/whale/schemas"
)

func row(h, m, task string, reward float64, correct bool, turns int32, prompt, completion int64, errText string) schemas.Rollout {
	return schemas.Rollout{HarnessID: h, ModelID: m, TaskID: task, Reward: reward, Correct: correct,
		Turns: turns, PromptTokens: prompt, CompletionTokens: completion, Error: errText}
}

// rowsFixture: harness a has two tasks (4 samples each), harness b one task
// with 2 samples, one of which failed.
func rowsFixture() []schemas.Rollout {
	return []schemas.Rollout{
		row("a", "m", "t1", 1, true, 2, 10, 5, ""),
		row("a", "m", "t1", 0, false, 4, 20, 5, ""),
		row("a", "m", "t1", 1, true, 2, 10, 5, ""),
		row("a", "m", "t1", 0, false, 4, 30, 5, ""),
		row("a", "m", "t2", 0, false, 1, 10, 0, ""),
		row("a", "m", "t2", 0, false, 1, 10, 0, ""),
		row("a", "m", "t2", 0.5, false, 3, 10, 0, ""),
		row("a", "m", "t2", 1, true, 3, 10, 0, ""),
		row("b", "m", "t1", 1, true, 5, 100, 50, ""),
		row("b", "m", "t1", 0, false, 1, 7, 0, "model: 500"),
	}
}

func TestAccumulatorEvals(t *testing.T) {
	cases := []struct {
		name string
		k    int
		want []schemas.Eval
	}{
		{"k=n", 0, []schemas.Eval{
			// t1: rewards 1,0,1,0; 2 of 4 correct; any-correct = 1.
			{HarnessID: "a", ModelID: "m", TaskID: "t1", K: 4, MeanReward: 0.5, PassAtK: 1, MeanTurns: 3, MeanTokens: 22.5},
			{HarnessID: "a", ModelID: "m", TaskID: "t2", K: 4, MeanReward: 0.375, PassAtK: 1, MeanTurns: 2, MeanTokens: 10},
			{HarnessID: "b", ModelID: "m", TaskID: "t1", K: 2, MeanReward: 0.5, PassAtK: 1, MeanTurns: 3, MeanTokens: 78.5},
		}},
		{"k=2", 2, []schemas.Eval{
			// t1: 1 - C(2,2)/C(4,2) = 5/6; t2: 1 - C(3,2)/C(4,2) = 1/2.
			{HarnessID: "a", ModelID: "m", TaskID: "t1", K: 2, MeanReward: 0.5, PassAtK: 5.0 / 6, MeanTurns: 3, MeanTokens: 22.5},
			{HarnessID: "a", ModelID: "m", TaskID: "t2", K: 2, MeanReward: 0.375, PassAtK: 0.5, MeanTurns: 2, MeanTokens: 10},
			{HarnessID: "b", ModelID: "m", TaskID: "t1", K: 2, MeanReward: 0.5, PassAtK: 1, MeanTurns: 3, MeanTokens: 78.5},
		}},
		{"k=3 above a group's n", 3, []schemas.Eval{
			// t1: 1 - C(2,3)/C(4,3) = 1; t2: 1 - C(3,3)/C(4,3) = 3/4; b has
			// only 2 samples and is scored with K = 2.
			{HarnessID: "a", ModelID: "m", TaskID: "t1", K: 3, MeanReward: 0.5, PassAtK: 1, MeanTurns: 3, MeanTokens: 22.5},
			{HarnessID: "a", ModelID: "m", TaskID: "t2", K: 3, MeanReward: 0.375, PassAtK: 0.75, MeanTurns: 2, MeanTokens: 10},
			{HarnessID: "b", ModelID: "m", TaskID: "t1", K: 2, MeanReward: 0.5, PassAtK: 1, MeanTurns: 3, MeanTokens: 78.5},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := NewAccumulator(tc.k)
			for _, r := range rowsFixture() {
				a.Add(r)
			}
			got := a.Evals()
			if len(got) != len(tc.want) {
				t.Fatalf("got %d evals, want %d: %+v", len(got), len(tc.want), got)
			}
			for i := range got {
				if !evalClose(got[i], tc.want[i]) {
					t.Errorf("eval %d:\n got  %+v\n want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func evalClose(a, b schemas.Eval) bool {
	near := func(x, y float64) bool { return math.Abs(x-y) < 1e-12 }
	return a.HarnessID == b.HarnessID && a.ModelID == b.ModelID && a.TaskID == b.TaskID && a.K == b.K &&
		near(a.MeanReward, b.MeanReward) && near(a.PassAtK, b.PassAtK) &&
		near(a.MeanTurns, b.MeanTurns) && near(a.MeanTokens, b.MeanTokens)
}

func TestAccumulatorSummaries(t *testing.T) {
	a := NewAccumulator(2)
	for _, r := range rowsFixture() {
		a.Add(r)
	}
	got := a.Summaries()
	want := []Summary{
		{HarnessID: "a", ModelID: "m", MeanAtK: (0.5 + 0.375) / 2, PassAtK: (5.0/6 + 0.5) / 2, MeanTurns: 2.5, MeanTokens: 16.25, Tasks: 2, Episodes: 8},
		{HarnessID: "b", ModelID: "m", MeanAtK: 0.5, PassAtK: 1, MeanTurns: 3, MeanTokens: 78.5, Tasks: 1, Episodes: 2, Failed: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range got {
		g, w := got[i], want[i]
		near := func(x, y float64) bool { return math.Abs(x-y) < 1e-12 }
		if g.HarnessID != w.HarnessID || g.ModelID != w.ModelID || g.Tasks != w.Tasks || g.Episodes != w.Episodes || g.Failed != w.Failed ||
			!near(g.MeanAtK, w.MeanAtK) || !near(g.PassAtK, w.PassAtK) || !near(g.MeanTurns, w.MeanTurns) || !near(g.MeanTokens, w.MeanTokens) {
			t.Errorf("summary %d:\n got  %+v\n want %+v", i, g, w)
		}
	}
	if empty := NewAccumulator(0); empty.Evals() == nil || len(empty.Summaries()) != 0 {
		t.Fatalf("an empty accumulator: evals %v, summaries %v", empty.Evals(), empty.Summaries())
	}
}

// The same rows in any order give the same evals and summaries, bit for
// bit, including fractional rewards.
func TestAccumulatorOrderIndependent(t *testing.T) {
	var rows []schemas.Rollout
	rng := rand.New(rand.NewPCG(1, 2))
	for task := range 50 {
		for range 8 {
			rows = append(rows, row("h", "m", string(rune('A'+task%26))+string(rune('a'+task/26)),
				rng.Float64(), rng.IntN(3) == 0, int32(rng.IntN(10)), int64(rng.IntN(1000)), int64(rng.IntN(100)), ""))
		}
	}
	ref := NewAccumulator(4)
	for _, r := range rows {
		ref.Add(r)
	}
	for try := range 5 {
		rng.Shuffle(len(rows), func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
		a := NewAccumulator(4)
		for _, r := range rows {
			a.Add(r)
		}
		if !reflect.DeepEqual(a.Evals(), ref.Evals()) || !reflect.DeepEqual(a.Summaries(), ref.Summaries()) {
			t.Fatalf("shuffle %d changed the result", try)
		}
	}
	if ref.Len() != 50 {
		t.Fatalf("Len = %d, want 50", ref.Len())
	}
}

func BenchmarkAccumulatorAdd(b *testing.B) {
	tasks := make([]string, 1000)
	for i := range tasks {
		tasks[i] = "task-" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))
	}
	a := NewAccumulator(8)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		a.Add(row("h", "m", tasks[i%len(tasks)], float64(i%2), i%2 == 0, 3, 100, 20, ""))
	}
}

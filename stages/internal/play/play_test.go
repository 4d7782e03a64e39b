package play

import (
	"testing"

	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages/internal/stagetest"
)

func TestSpan(t *testing.T) {
	for _, c := range []struct {
		offset, limit, n   int
		wantStart, wantLen int
	}{
		{0, 0, 10, 0, 10},
		{0, 3, 10, 0, 3},
		{9, 3, 10, 9, 3},
		{10, 3, 10, 0, 3},
		{25, 4, 10, 5, 4},
		{-1, 2, 10, 9, 2},
		{3, 11, 10, 3, 10},
		{3, 5, 0, 0, 0},
	} {
		s, l := Window{Offset: c.offset, Limit: c.limit}.Span(c.n)
		if s != c.wantStart || l != c.wantLen {
			t.Errorf("Window{%d,%d}.Span(%d) = %d,%d, want %d,%d", c.offset, c.limit, c.n, s, l, c.wantStart, c.wantLen)
		}
	}
}

// Consecutive windows of a fixed size cover every task equally often.
func TestWindowsCycle(t *testing.T) {
	const n, batch, steps = 7, 3, 7 * 4
	count := make([]int, n)
	for step := range steps {
		s, l := Window{Offset: step * batch, Limit: batch}.Span(n)
		for j := range l {
			count[(s+j)%n]++
		}
	}
	for i, c := range count {
		if c != steps*batch/n {
			t.Fatalf("task %d in %d windows, want %d (%v)", i, c, steps*batch/n, count)
		}
	}
}

func FuzzSpan(f *testing.F) {
	f.Add(0, 0, 1)
	f.Add(-5, 3, 4)
	f.Add(1<<40, -1, 3)
	f.Fuzz(func(t *testing.T, offset, limit, n int) {
		if n <= 0 || n > 1<<20 {
			return
		}
		s, l := Window{Offset: offset, Limit: limit}.Span(n)
		if s < 0 || s >= n || l < 1 || l > n || (limit > 0 && limit <= n && l != limit) {
			t.Fatalf("Window{%d,%d}.Span(%d) = %d,%d", offset, limit, n, s, l)
		}
	})
}

func TestSeed(t *testing.T) {
	seen := map[int64]string{}
	for _, stage := range []int64{0, 1, -1} {
		for _, task := range []string{"a", "b", "a\x001"} {
			for sample := range 8 {
				s := Seed(stage, task, sample)
				if s < 0 || s >= 1<<30 {
					t.Fatalf("seed %d out of [0, 2^30)", s)
				}
				if s != Seed(stage, task, sample) {
					t.Fatal("seed not deterministic")
				}
				key := string(rune(stage)) + task + string(rune(sample))
				if prev, dup := seen[s]; dup {
					t.Fatalf("seed %d for %q and %q", s, prev, key)
				}
				seen[s] = key
			}
		}
	}
}

func TestStats(t *testing.T) {
	var s Stats
	for _, r := range []schemas.Rollout{
		{ModelID: "b", Reward: 1, Correct: true, Turns: 2, PromptTokens: 5, CompletionTokens: 1},
		{ModelID: "a", Error: "boom", Turns: 0},
		{ModelID: "b", Reward: 0.5, Turns: 1},
	} {
		s.Add(&r)
	}
	if s.Episodes != 3 || s.Failed != 1 || s.Correct != 1 || Mean(s.RewardSum, s.Episodes) != 0.5 || Mean(s.TurnsSum, s.Episodes) != 1 ||
		s.PromptTokens != 5 || len(s.ModelIDs()) != 2 || s.ModelIDs()[0] != "a" || Mean(1, 0) != 0 {
		t.Fatalf("%+v %v", s, s.ModelIDs())
	}
}

func TestCheckModel(t *testing.T) {
	srv := modeltest.NewServer(t, stagetest.Policy)
	c := stagetest.Client(t, srv, "m", 1)
	for _, tc := range []struct {
		name string
		ok   bool
	}{{"m", true}, {"other", false}, {"", false}} {
		if err := CheckModel(c, tc.name); (err == nil) != tc.ok {
			t.Errorf("CheckModel(%q) = %v", tc.name, err)
		}
	}
	if CheckModel(nil, "m") == nil {
		t.Error("no client accepted")
	}
	if CheckModel(stagetest.FakeChatter{}, "anything") != nil {
		t.Error("a chatter that does not name its model was refused")
	}
}

package play

import (
	"slices"
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

func seedp(s int64) *int64 { return &s }

// checkDistinct fails unless idx holds distinct indices below n.
func checkDistinct(t *testing.T, w Window, n int, idx []int) {
	t.Helper()
	seen := map[int]bool{}
	for _, i := range idx {
		if i < 0 || i >= n || seen[i] {
			t.Fatalf("%+v over %d: %v holds %d twice or out of range", w, n, idx, i)
		}
		seen[i] = true
	}
}

// Without Shuffle, Indices is the stored order from Span, wrapping.
func TestIndicesStored(t *testing.T) {
	for _, c := range []struct {
		offset, limit, n int
		want             []int
	}{
		{0, 3, 5, []int{0, 1, 2}},
		{4, 3, 5, []int{4, 0, 1}},
		{12, 0, 5, []int{2, 3, 4, 0, 1}},
		{-1, 2, 5, []int{4, 0}},
		{0, 2, 0, []int{}},
	} {
		got := Window{Offset: c.offset, Limit: c.limit}.Indices(c.n)
		if !slices.Equal(got, c.want) {
			t.Errorf("Window{%d,%d}.Indices(%d) = %v, want %v", c.offset, c.limit, c.n, got, c.want)
		}
	}
}

// The shuffled order is pinned: a change of these values changes every
// run's batches, which reruns must not see.
func TestIndicesPinned(t *testing.T) {
	for _, c := range []struct {
		w    Window
		n    int
		want []int
	}{
		{Window{Offset: 0, Limit: 4, Shuffle: seedp(1)}, 10, []int{6, 3, 1, 9}},
		{Window{Offset: 8, Limit: 4, Shuffle: seedp(1)}, 10, []int{0, 5, 3, 8}},
		{Window{Offset: 0, Limit: 0, Shuffle: seedp(1)}, 5, []int{1, 0, 3, 4, 2}},
	} {
		if got := c.w.Indices(c.n); !slices.Equal(got, c.want) {
			t.Errorf("Window{%d,%d,%d}.Indices(%d) = %v, want %v", c.w.Offset, c.w.Limit, *c.w.Shuffle, c.n, got, c.want)
		}
	}
}

// Over a sequence of windows of a grid, every epoch plays each task
// exactly once, no window holds a task twice, the windows are a pure
// function of (seed, window), and epochs differ.
func TestIndicesEpochs(t *testing.T) {
	for _, c := range []struct {
		n, limit, phase int
	}{
		{1, 1, 0}, {1, 0, 0}, {2, 1, 0}, {3, 2, 0}, {5, 3, 0}, {7, 3, 0}, {10, 4, 0},
		{10, 4, 1}, {10, 3, 2}, {10, 5, 0}, {11, 6, 0}, {12, 5, 3}, {100, 7, 0},
		{100, 32, 0}, {100, 50, 0}, {64, 32, 0}, {20, 8, 4},
		// Above half the tasks: one order for every epoch.
		{5, 4, 0}, {10, 6, 0}, {10, 0, 0}, {10, 99, 0}, {10, 10, 3},
	} {
		for _, seed := range []int64{0, 1, -7, 1 << 62} {
			_, L := Window{Limit: c.limit}.Span(c.n)
			epochs := 6
			count := map[[2]int]int{} // (epoch, task) -> slots
			var orders [][]int
			for k := 0; k*L < epochs*c.n; k++ {
				w := Window{Offset: c.phase + k*L, Limit: c.limit, Shuffle: seedp(seed)}
				idx := w.Indices(c.n)
				if len(idx) != L {
					t.Fatalf("%+v over %d: %d tasks, want %d", w, c.n, len(idx), L)
				}
				checkDistinct(t, w, c.n, idx)
				if again := w.Indices(c.n); !slices.Equal(idx, again) {
					t.Fatalf("%+v over %d: %v then %v", w, c.n, idx, again)
				}
				for j, i := range idx {
					p := w.Offset + j
					e := p / c.n
					count[[2]int{e, i}]++
					for len(orders) <= e {
						orders = append(orders, make([]int, c.n))
					}
					orders[e][p%c.n] = i
				}
			}
			// The first and last epochs are partly covered.
			for e := 1; e < epochs-1; e++ {
				for i := range c.n {
					if got := count[[2]int{e, i}]; got != 1 {
						t.Fatalf("n %d limit %d phase %d seed %d: task %d in epoch %d %d times", c.n, c.limit, c.phase, seed, i, e, got)
					}
				}
			}
			if c.n >= 5 && 2*L-1 <= c.n && slices.Equal(orders[1], orders[2]) && slices.Equal(orders[2], orders[3]) {
				t.Errorf("n %d limit %d seed %d: epochs 1-3 in one order %v", c.n, c.limit, seed, orders[1])
			}
		}
	}
}

// Windows far out, or with any offset, limit and count, hold distinct
// tasks, and the same windows agree.
func TestIndicesFar(t *testing.T) {
	for _, w := range []Window{
		{Offset: 1 << 40, Limit: 7},
		{Offset: 1<<62 + 3, Limit: 50},
		{Offset: -(1 << 50), Limit: 13},
		{Offset: 1<<63 - 1, Limit: 1},
		{Offset: 1<<63 - 1, Limit: 0},
	} {
		w.Shuffle = seedp(3)
		for _, n := range []int{1, 2, 99, 100} {
			idx := w.Indices(n)
			checkDistinct(t, w, n, idx)
			if !slices.Equal(idx, w.Indices(n)) {
				t.Fatalf("%+v over %d not deterministic", w, n)
			}
		}
	}
}

// A boundary window whose tail and head share a task gets a repaired head;
// the task comes later in the next epoch.
func TestIndicesBoundaryRepair(t *testing.T) {
	repaired := 0
	for seed := range int64(200) {
		const n, L = 9, 4
		for k := range 30 {
			w := Window{Offset: k * L, Limit: L, Shuffle: seedp(seed)}
			start := w.Offset % n
			if start+L <= n {
				continue
			}
			tail := perm(n, seed, w.Offset/n)[start:]
			head := perm(n, seed, w.Offset/n+1)[:L-(n-start)]
			if !slices.ContainsFunc(head, func(i int) bool { return slices.Contains(tail, i) }) {
				continue
			}
			repaired++
			idx := w.Indices(n)
			checkDistinct(t, w, n, idx)
			if !slices.Equal(idx[:len(tail)], tail) {
				t.Fatalf("%+v over %d: %v does not start with epoch %d's tail %v", w, n, idx, w.Offset/n, tail)
			}
		}
	}
	if repaired == 0 {
		t.Fatal("no boundary window needed a repair")
	}
}

func FuzzIndices(f *testing.F) {
	f.Add(0, 0, 1, int64(0))
	f.Add(7, 3, 9, int64(5))
	f.Add(1<<40, 5, 9, int64(-1))
	f.Fuzz(func(t *testing.T, offset, limit, n int, seed int64) {
		if n <= 0 || n > 1<<10 {
			return
		}
		w := Window{Offset: offset, Limit: limit, Shuffle: &seed}
		idx := w.Indices(n)
		_, l := w.Span(n)
		if len(idx) != l {
			t.Fatalf("%+v over %d: %d tasks, want %d", w, n, len(idx), l)
		}
		checkDistinct(t, w, n, idx)
	})
}

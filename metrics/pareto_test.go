package metrics

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func ids(ps []Point) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.ID
	}
	return out
}

func TestFrontier(t *testing.T) {
	nan := math.NaN()
	cases := []struct {
		name   string
		points []Point
		want   []string
	}{
		{"empty", nil, []string{}},
		{"one", []Point{{"a", 0.5, 3}}, []string{"a"}},
		{"trade-off", []Point{{"slow", 0.8, 6}, {"fast", 0.5, 2}, {"mid", 0.6, 4}}, []string{"slow", "mid", "fast"}},
		{"dominated", []Point{{"a", 0.5, 3}, {"b", 0.6, 3}, {"c", 0.6, 2}, {"d", 0.4, 1}}, []string{"c", "d"}},
		{"same success, more turns", []Point{{"a", 0.5, 4}, {"b", 0.5, 3}}, []string{"b"}},
		{"same turns, less success", []Point{{"a", 0.4, 3}, {"b", 0.5, 3}}, []string{"b"}},
		{"identical points all stay, in input order", []Point{{"x", 0.5, 3}, {"a", 0.7, 5}, {"y", 0.5, 3}, {"z", 0.2, 3}}, []string{"a", "x", "y"}},
		{"NaN never on the frontier", []Point{{"n", nan, 1}, {"a", 0.5, 3}, {"m", 0.9, nan}}, []string{"a"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ids(Frontier(tc.points)); !slices.Equal(got, tc.want) {
				t.Fatalf("Frontier = %v, want %v", got, tc.want)
			}
		})
	}
}

// Frontier agrees with the definition, checked pairwise, on random points
// with many ties.
func TestFrontierDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for try := range 200 {
		pts := make([]Point, rng.IntN(30))
		for i := range pts {
			pts[i] = Point{ID: string(rune('a' + i)), Success: float64(rng.IntN(5)) / 4, Turns: float64(rng.IntN(5))}
		}
		var want []Point
		for _, p := range pts {
			dominated := false
			for _, q := range pts {
				if q.dominates(p) {
					dominated = true
				}
			}
			if !dominated {
				want = append(want, p)
			}
		}
		slices.SortStableFunc(want, byRank)
		if got := Frontier(pts); !slices.Equal(ids(got), ids(want)) {
			t.Fatalf("try %d: Frontier(%v) = %v, want %v", try, pts, ids(got), ids(want))
		}
	}
}

func TestWinner(t *testing.T) {
	cases := []struct {
		name    string
		archive []Point
		want    string
		index   int
	}{
		{"top success", []Point{{"h0", 0.4, 2}, {"h1", 0.6, 9}, {"h2", 0.5, 1}}, "h1", 1},
		{"tie on success: fewer turns", []Point{{"h0", 0.6, 5}, {"h1", 0.6, 4}, {"h2", 0.6, 4.5}}, "h1", 1},
		{"full tie: earlier in the archive", []Point{{"h0", 0.5, 3}, {"h1", 0.6, 3}, {"h2", 0.6, 3}}, "h1", 1},
		{"the search may revert", []Point{{"h0", 0.7, 3}, {"h1", 0.6, 2}, {"h2", 0.5, 1}}, "h0", 0},
		{"NaN skipped", []Point{{"n", math.NaN(), 1}, {"h1", 0.1, 3}}, "h1", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, i, ok := Winner(tc.archive)
			if !ok || w.ID != tc.want || i != tc.index {
				t.Fatalf("Winner = %v at %d (ok %v), want %s at %d", w, i, ok, tc.want, tc.index)
			}
			if f := Frontier(tc.archive); !slices.ContainsFunc(f, func(p Point) bool { return p.ID == w.ID }) {
				t.Fatalf("winner %s is not on the frontier %v", w.ID, ids(f))
			}
		})
	}
	if _, i, ok := Winner(nil); ok || i != -1 {
		t.Fatalf("Winner(nil) = %d, %v", i, ok)
	}
}

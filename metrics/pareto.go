package metrics

import (
	"cmp"
	"math"
	"slices"
)

// Point is one harness candidate in the (success ↑, mean turns ↓) plane.
type Point struct {
	ID      string  `json:"id"`
	Success float64 `json:"success"`
	Turns   float64 `json:"turns"`
}

func (p Point) valid() bool { return !math.IsNaN(p.Success) && !math.IsNaN(p.Turns) }

// dominates reports whether p is at least as good as q on both axes and
// better on one.
func (p Point) dominates(q Point) bool {
	return p.Success >= q.Success && p.Turns <= q.Turns && (p.Success > q.Success || p.Turns < q.Turns)
}

// Frontier returns the points no other point dominates, sorted by success
// descending, then turns ascending, then input order. Identical points
// all stay. Points with a NaN coordinate (a candidate with no scored
// episode) are never on the frontier.
func Frontier(points []Point) []Point {
	idx := make([]int, 0, len(points))
	for i, p := range points {
		if p.valid() {
			idx = append(idx, i)
		}
	}
	slices.SortStableFunc(idx, func(i, j int) int { return byRank(points[i], points[j]) })
	// In rank order a point is dominated exactly when an earlier point has
	// fewer turns, or the same turns with more success: keep the best
	// (turns, success) seen so far.
	var out []Point
	var best Point
	for n, i := range idx {
		p := points[i]
		if n > 0 && best.dominates(p) {
			continue
		}
		out = append(out, p)
		if n == 0 || p.Turns < best.Turns {
			best = p
		}
	}
	return out
}

// byRank orders by success descending, then turns ascending.
func byRank(p, q Point) int {
	return cmp.Or(cmp.Compare(q.Success, p.Success), cmp.Compare(p.Turns, q.Turns))
}

// Winner applies WHALE's acceptance rule to the whole archive of a harness
// phase, in archive order: the top success rate, ties broken by fewer mean
// turns, then by the earlier place in archive. ok is false when the archive
// holds no point without NaN. The winner is always on the Frontier.
func Winner(archive []Point) (w Point, i int, ok bool) {
	i = -1
	for j, p := range archive {
		if !p.valid() {
			continue
		}
		if i < 0 || byRank(p, archive[i]) < 0 {
			i = j
		}
	}
	if i < 0 {
		return Point{}, -1, false
	}
	return archive[i], i, true
}

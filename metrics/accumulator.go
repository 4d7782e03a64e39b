package metrics

import (
	"cmp"
	"math"
	"slices"
	"strings"

	"github.com/whalerun/whale/schemas"
)

// Accumulator scores rollout rows per (harness, model, task) group as they
// stream past. Rows may arrive in any order; memory grows with the number of
// groups, not rows. The zero value is not ready: use NewAccumulator. It is not
// safe for concurrent use.
type Accumulator struct {
	k      int
	groups map[groupKey]*group
}

type groupKey struct{ harness, model, task string }

// group keeps only sums: an evaluation of millions of rows holds a few
// dozen bytes per task.
type group struct {
	n, correct, failed int
	reward             Kahan
	turns, tokens      int64
}

// NewAccumulator scores pass@k with k samples per group. k = 0 means k is
// each group's own sample count (pass@k is then "any correct"). A group
// with fewer than k samples is scored with k = n, its sample count, and its
// Eval's K says so: the estimator is undefined below k samples.
func NewAccumulator(k int) *Accumulator {
	return &Accumulator{k: max(k, 0), groups: make(map[groupKey]*group)}
}

// Add counts one episode.
func (a *Accumulator) Add(r schemas.Rollout) {
	key := groupKey{r.HarnessID, r.ModelID, r.TaskID}
	g := a.groups[key]
	if g == nil {
		// Clone so that a group does not pin the buffer a decoded row's
		// strings may share with its messages and trace.
		key = groupKey{strings.Clone(r.HarnessID), strings.Clone(r.ModelID), strings.Clone(r.TaskID)}
		g = &group{}
		a.groups[key] = g
	}
	g.n++
	if r.Correct {
		g.correct++
	}
	if r.Error != "" {
		g.failed++
	}
	g.reward.Add(r.Reward)
	g.turns += int64(r.Turns)
	g.tokens += r.PromptTokens + r.CompletionTokens
}

// Len is the number of groups seen.
func (a *Accumulator) Len() int { return len(a.groups) }

type scored struct {
	key groupKey
	g   *group
	ev  schemas.Eval
}

func (a *Accumulator) sorted() []scored {
	out := make([]scored, 0, len(a.groups))
	for k, g := range a.groups {
		out = append(out, scored{key: k, g: g, ev: a.eval(k, g)})
	}
	slices.SortFunc(out, func(x, y scored) int { return compareKeys(x.key, y.key) })
	return out
}

func compareKeys(x, y groupKey) int {
	return cmp.Or(cmp.Compare(x.harness, y.harness), cmp.Compare(x.model, y.model), cmp.Compare(x.task, y.task))
}

func (a *Accumulator) eval(k groupKey, g *group) schemas.Eval {
	kk := a.k
	if kk == 0 || g.n < kk {
		kk = g.n
	}
	// n ≥ kk ≥ 1 and 0 ≤ correct ≤ n by construction.
	pass, _ := PassAtK(g.n, g.correct, kk)
	n := float64(g.n)
	return schemas.Eval{
		HarnessID:  k.harness,
		ModelID:    k.model,
		TaskID:     k.task,
		K:          int32(kk),
		MeanReward: g.reward.Sum() / n,
		PassAtK:    pass,
		MeanTurns:  float64(g.turns) / n,
		MeanTokens: float64(g.tokens) / n,
	}
}

// Evals returns one row per group, sorted by harness, model and task.
func (a *Accumulator) Evals() []schemas.Eval {
	s := a.sorted()
	out := make([]schemas.Eval, len(s))
	for i := range s {
		out[i] = s[i].ev
	}
	return out
}

// Summary scores one (harness, model) pair over its tasks. The means are
// macro averages over tasks of the per-task values of Evals.
type Summary struct {
	HarnessID  string  `json:"harness_id"`
	ModelID    string  `json:"model_id"`
	MeanAtK    float64 `json:"mean_at_k"`
	PassAtK    float64 `json:"pass_at_k"`
	MeanTurns  float64 `json:"mean_turns"`
	MeanTokens float64 `json:"mean_tokens"`
	Tasks      int     `json:"tasks"`
	Episodes   int     `json:"episodes"`
	// Failed counts episodes with an error (error != ""); they are also
	// counted, with their rows' rewards, in the scores above.
	Failed int `json:"failed"`
}

// Summaries returns one Summary per (harness, model), sorted by harness
// and model.
func (a *Accumulator) Summaries() []Summary {
	var out []Summary
	var cur *Summary
	// Groups arrive sorted, so one pass over tasks in a fixed order makes
	// the float sums independent of the order rows were added in.
	for _, s := range a.sorted() {
		if cur == nil || cur.HarnessID != s.key.harness || cur.ModelID != s.key.model {
			if cur != nil {
				out = append(out, cur.finish())
			}
			cur = &Summary{HarnessID: s.key.harness, ModelID: s.key.model}
		}
		cur.Tasks++
		cur.Episodes += s.g.n
		cur.Failed += s.g.failed
		cur.MeanAtK += s.ev.MeanReward
		cur.PassAtK += s.ev.PassAtK
		cur.MeanTurns += s.ev.MeanTurns
		cur.MeanTokens += s.ev.MeanTokens
	}
	if cur != nil {
		out = append(out, cur.finish())
	}
	return out
}

func (s *Summary) finish() Summary {
	t := float64(s.Tasks)
	r := *s
	r.MeanAtK /= t
	r.PassAtK /= t
	r.MeanTurns /= t
	r.MeanTokens /= t
	return r
}

// Kahan is a Neumaier-compensated sum: the mean reward of a group then
// changes by at most rounding, not by accumulated error, with the order
// its rows arrive in. Its zero value is an empty sum. analysis sums row
// groups with it and merges them (Merge): bit for bit an Accumulator's
// numbers where a group's rows lie in one row group, within rounding
// otherwise.
type Kahan struct{ s, c float64 }

// Add adds x.
func (k *Kahan) Add(x float64) {
	t := k.s + x
	if math.Abs(k.s) >= math.Abs(x) {
		k.c += (k.s - t) + x
	} else {
		k.c += (x - t) + k.s
	}
	k.s = t
}

// Merge adds what o summed.
func (k *Kahan) Merge(o Kahan) {
	k.Add(o.s)
	k.Add(o.c)
}

// Sum is the compensated total.
func (k *Kahan) Sum() float64 { return k.s + k.c }

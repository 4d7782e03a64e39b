package report

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
)

// GroupSpec names the runs that are seeds of one schedule: the same
// experiment with only the seed changed.
type GroupSpec struct {
	Name string
	Runs []string
}

// Comparison sets schedules side by side over seeds.
type Comparison struct {
	Groups []*Group `json:"groups"`
	// EqualSpend is the smallest budgeted spend any compared run reached:
	// every run's curve is read there (Group.AtEqualSpend), so that a run
	// that stopped short of its budget is compared at the spend it reached
	// as well as at its own end.
	EqualSpend int64 `json:"equal_spend"`
	// Short lists the runs that ended below ShortFraction of their
	// budget.rollouts, the reason the equal-spend reading matters.
	Short []ShortRun `json:"short,omitempty"`
	// Note says in words how to read the comparison.
	Note string `json:"note"`
}

// ShortRun is a finished run that spent well under its budget.
type ShortRun struct {
	Run      string `json:"run"`
	Rollouts int64  `json:"rollouts"`
	Budget   int64  `json:"budget"`
	Reason   string `json:"reason"`
}

// ShortFraction: a run that spent less than this share of its rollout
// budget is named as short.
const ShortFraction = 0.9

// Group is one schedule's runs over seeds and their statistics.
type Group struct {
	Name  string   `json:"name"`
	Label string   `json:"label"`
	Runs  []string `json:"runs"`
	Seeds []int64  `json:"seeds"`
	// Index is the group's colour in the plots.
	Index int `json:"index"`
	// Peak and Final are the runs' peak and final test mean@k; Rollouts
	// the budgeted rollouts each spent; AtEqualSpend each run's test
	// mean@k in force at Comparison.EqualSpend (its newest test at or
	// before that spend).
	Peak         Stat `json:"peak"`
	Final        Stat `json:"final"`
	Rollouts     Stat `json:"rollouts"`
	AtEqualSpend Stat `json:"at_equal_spend"`
}

// Stat summarises one number over seeds: Values in the group's run order,
// their mean, sample standard deviation (n−1; 0 for one value), minimum
// and maximum. N counts the runs that have the number.
type Stat struct {
	N      int       `json:"n"`
	Values []float64 `json:"values"`
	Mean   float64   `json:"mean"`
	Std    float64   `json:"std"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
}

// NewStat computes a Stat; NaN values (a run without the number) are left
// out.
func NewStat(values []float64) Stat {
	s := Stat{Values: []float64{}}
	for _, v := range values {
		if !math.IsNaN(v) {
			s.Values = append(s.Values, v)
		}
	}
	s.N = len(s.Values)
	if s.N == 0 {
		s.Mean, s.Std, s.Min, s.Max = math.NaN(), math.NaN(), math.NaN(), math.NaN()
		return s
	}
	s.Min, s.Max = slices.Min(s.Values), slices.Max(s.Values)
	for _, v := range s.Values {
		s.Mean += v
	}
	s.Mean /= float64(s.N)
	if s.N > 1 {
		var ss float64
		for _, v := range s.Values {
			ss += (v - s.Mean) * (v - s.Mean)
		}
		s.Std = math.Sqrt(ss / float64(s.N-1))
	}
	return s
}

// MarshalJSON writes NaN (no value) as null: JSON has no NaN.
func (s Stat) MarshalJSON() ([]byte, error) {
	f := func(v float64) string {
		if math.IsNaN(v) {
			return "null"
		}
		return fmt.Sprint(v)
	}
	vals := make([]string, len(s.Values))
	for i, v := range s.Values {
		vals[i] = f(v)
	}
	return fmt.Appendf(nil, `{"n":%d,"values":[%s],"mean":%s,"std":%s,"min":%s,"max":%s}`,
		s.N, strings.Join(vals, ","), f(s.Mean), f(s.Std), f(s.Min), f(s.Max)), nil
}

// ScoreAt is the run's test mean@k in force at spend x: its newest test
// placed at or before x (tests sit at the spend before them). NaN when
// the run has no test by then.
func ScoreAt(r *Run, x int64) float64 {
	v := math.NaN()
	for _, t := range r.Tests {
		if t.Rollouts > x {
			break
		}
		v = t.MeanAtK
	}
	return v
}

// Compare groups d's runs as groups says and fills d.Comparison. Every
// run of a group must be among d.Runs, and no run may be in two groups.
func Compare(d *Data, groups []GroupSpec) error {
	if len(groups) == 0 {
		return errors.New("report: compare: no group given")
	}
	byName := map[string]*Run{}
	for _, r := range d.Runs {
		byName[r.Name] = r
	}
	used := map[string]string{}
	c := &Comparison{EqualSpend: -1}
	for i, g := range groups {
		if len(g.Runs) == 0 {
			return fmt.Errorf("report: compare: group %q has no run", g.Name)
		}
		grp := &Group{Name: g.Name, Label: g.Name, Index: i}
		for _, name := range g.Runs {
			r := byName[name]
			if r == nil {
				return fmt.Errorf("report: compare: group %q: run %q is not in the report", g.Name, name)
			}
			if other, ok := used[name]; ok {
				return fmt.Errorf("report: compare: run %q is in groups %q and %q", name, other, g.Name)
			}
			used[name] = g.Name
			grp.Runs = append(grp.Runs, name)
			grp.Seeds = append(grp.Seeds, r.Seed)
			if c.EqualSpend < 0 || r.Rollouts < c.EqualSpend {
				c.EqualSpend = r.Rollouts
			}
			if r.Budget.Rollouts > 0 && r.State == StateDone && float64(r.Rollouts) < ShortFraction*float64(r.Budget.Rollouts) {
				c.Short = append(c.Short, ShortRun{Run: name, Rollouts: r.Rollouts, Budget: r.Budget.Rollouts, Reason: r.StateNote})
			}
		}
		first := byName[g.Runs[0]]
		grp.Label = first.Schedule
		if first.Switch != "" {
			grp.Label += " (" + first.Switch + ")"
		}
		c.Groups = append(c.Groups, grp)
	}
	for _, grp := range c.Groups {
		var peak, final, spent, at []float64
		for _, name := range grp.Runs {
			r := byName[name]
			p, f := math.NaN(), math.NaN()
			if r.Peak != nil {
				p, f = r.Peak.MeanAtK, r.Final.MeanAtK
			}
			peak, final = append(peak, p), append(final, f)
			spent = append(spent, float64(r.Rollouts))
			at = append(at, ScoreAt(r, c.EqualSpend))
		}
		grp.Peak, grp.Final, grp.Rollouts, grp.AtEqualSpend = NewStat(peak), NewStat(final), NewStat(spent), NewStat(at)
	}
	c.Note = compareNote(c)
	d.Comparison = c
	return nil
}

func compareNote(c *Comparison) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Each schedule ran once per seed (the seed changes sampling, the order of the training tasks and the proposer's choices; the data split is the same). "+
		"Numbers are the mean over seeds, ± the sample standard deviation, and [min–max]. "+
		"At equal spend reads every run's test score in force at %d rollouts, the smallest spend any run reached: the newest test at or before it.", c.EqualSpend)
	var untested []string
	for _, g := range c.Groups {
		if g.AtEqualSpend.N < len(g.Runs) {
			untested = append(untested, fmt.Sprintf("%s (%d of %d seeds)", g.Label, len(g.Runs)-g.AtEqualSpend.N, len(g.Runs)))
		}
	}
	if len(untested) > 0 {
		fmt.Fprintf(&b, " Some runs had no test by then and are left out of that column: %s.", strings.Join(untested, ", "))
	}
	if len(c.Short) > 0 {
		var names []string
		for _, s := range c.Short {
			names = append(names, fmt.Sprintf("%s stopped at %d of %d rollouts (%s)", s.Run, s.Rollouts, s.Budget, s.Reason))
		}
		fmt.Fprintf(&b, " Not every run spent its budget: %s. Their final and peak scores were reached with fewer rollouts than the others', so compare them at equal spend too.", strings.Join(names, "; "))
	}
	return b.String()
}

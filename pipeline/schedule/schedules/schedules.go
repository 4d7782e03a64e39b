// Package schedules is the table of the experiment file's schedules: each
// row says which phases a schedule runs and whether it alternates. The
// spec validates against it, the planner (package schedule) derives its
// phases from it and the report labels runs with it. Adding a schedule is
// one row here and its rules in package schedule.
//
// It imports nothing of whale, so that the spec, which the planner
// imports, can read it too.
package schedules

import "slices"

// Schedule is one row of the table.
type Schedule struct {
	// Name is the schedule's name in experiment files.
	Name string
	// Weights and Harness say whether the schedule has weight phases
	// (RSFT) and harness phases (Meta-Harness search).
	Weights, Harness bool
	// Alternates: weight and harness phases take turns, switched by the
	// experiment's switch block (fixed or patience), until a budget ends.
	// A schedule with both kinds that does not alternate runs one weight
	// phase, then one harness phase (stagewise). One with a single kind
	// runs it as one phase.
	Alternates bool
	// PromptOnly: harness search may edit only the prompts of h0 (FST).
	PromptOnly bool
}

var table = []Schedule{
	// WHALE: weight and harness phases take turns.
	{Name: "whale", Weights: true, Harness: true, Alternates: true},
	// The baselines: RSFT alone under h0, Meta-Harness alone with the base
	// model, all weight training then all harness search, and Fast-Slow
	// Training (alternation with prompt-only harness search).
	{Name: "weights-only", Weights: true},
	{Name: "harness-only", Harness: true},
	{Name: "stagewise", Weights: true, Harness: true},
	{Name: "fst", Weights: true, Harness: true, Alternates: true, PromptOnly: true},
}

// All lists the schedules in the table's order.
func All() []Schedule { return slices.Clone(table) }

// Names lists the schedules' names in the table's order.
func Names() []string {
	names := make([]string, len(table))
	for i, s := range table {
		names[i] = s.Name
	}
	return names
}

// Get returns the schedule called name.
func Get(name string) (Schedule, bool) {
	i := slices.IndexFunc(table, func(s Schedule) bool { return s.Name == name })
	if i < 0 {
		return Schedule{}, false
	}
	return table[i], true
}

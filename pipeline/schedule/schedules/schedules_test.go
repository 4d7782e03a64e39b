package schedules

import (
	"slices"
	"testing"
)

// The table holds the paper's schedules with the shape of each.
func TestTable(t *testing.T) {
	if got, want := Names(), []string{"whale", "weights-only", "harness-only", "stagewise", "fst"}; !slices.Equal(got, want) {
		t.Fatalf("Names = %v, want %v", got, want)
	}
	for _, tc := range []struct {
		name                                     string
		weights, harness, alternates, promptOnly bool
	}{
		{"whale", true, true, true, false},
		{"weights-only", true, false, false, false},
		{"harness-only", false, true, false, false},
		{"stagewise", true, true, false, false},
		{"fst", true, true, true, true},
	} {
		s, ok := Get(tc.name)
		if !ok || s.Weights != tc.weights || s.Harness != tc.harness || s.Alternates != tc.alternates || s.PromptOnly != tc.promptOnly {
			t.Errorf("Get(%s) = %+v, %v", tc.name, s, ok)
		}
	}
	if _, ok := Get("whole"); ok {
		t.Error("Get found a schedule called whole")
	}
}

package schedule

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestPositionRoundTrip(t *testing.T) {
	tests := []struct {
		s string
		p Pos
	}{
		{"r000-t", Pos{0, SectionInitialTest, 0}},
		{"r001-w01", Pos{1, SectionWeight, 1}},
		{"r003-w02", Pos{3, SectionWeight, 2}},
		{"r003-w120", Pos{3, SectionWeight, 120}},
		{"r003-wt", Pos{3, SectionWeightTest, 0}},
		{"r003-h01", Pos{3, SectionHarness, 1}},
		{"r003-ht", Pos{3, SectionHarnessTest, 0}},
		{"r1234-h15", Pos{1234, SectionHarness, 15}},
	}
	for _, tt := range tests {
		p, err := ParsePosition(tt.s)
		if err != nil || p != tt.p {
			t.Errorf("ParsePosition(%q) = %+v, %v; want %+v", tt.s, p, err, tt.p)
		}
		if got := tt.p.String(); got != tt.s {
			t.Errorf("%+v.String() = %q, want %q", tt.p, got, tt.s)
		}
	}
}

func TestParsePositionErrors(t *testing.T) {
	for _, s := range []string{
		"", "r003", "r03-w01", "r003-w1", "r003-w00", "r003-w001", "r000-w01", "r001-t", "r003-x01",
		"r003-w01-rollout", "R003-w01", "r003-w+1", "r003-w 1", "r-03-w01", "r0003-w01", "r003-", "r003-wtt",
		"r003-w99999999999",
	} {
		if p, err := ParsePosition(s); err == nil {
			t.Errorf("ParsePosition(%q) = %+v, want an error", s, p)
		}
	}
}

// The position grammar lives here only: storage accepts any safe path
// segment as a position, so the rejections of grammatically wrong ones are
// asserted here (including those storage's own grammar used to assert).
func TestParsePositionGrammar(t *testing.T) {
	// What the planner writes.
	for _, s := range []string{"r000-t", "r001-w01", "r003-w02", "r003-w99", "r003-w100", "r001-wt", "r001-h01", "r003-h15", "r003-ht", "r999-w01", "r1000-w01", "r1234-w100"} {
		if _, err := ParsePosition(s); err != nil {
			t.Errorf("ParsePosition(%q): %v", s, err)
		}
	}
	tests := []struct{ in, why string }{
		{"r002-t", `the tests of round 2 are r002-wt and r002-ht`},
		{"r0001-w01", `round "0001": leading zero beyond 3 digits`},
		{"r0000-t", `round "0000": leading zero`},
		{"r000-wt", "rounds count from 1"},
		{"r000-w01", "rounds count from 1"},
		{"r3-w02", `round "3": want at least 3 digits`},
		{"r003-w2", `index "2": want at least 2 digits`},
		{"r003-w00", "count from 1"},
		{"r003-w001", "leading zero"},
		{"r002-xt", `unknown section "xt"`},
		{"r003-x01", `unknown section "x01"`},
		{"r003-data", `unknown section "data"`},
		{"r003-w01-rollout", `index "01-rollout": not a decimal number`},
		{"R003-w02", "does not start with 'r'"},
		{"r003.w02", "no '-'"},
		{"", "no '-'"},
		{"import", "no '-'"},
		{"r3", "no '-'"},
		{"tasks-train", "does not start with 'r'"},
		{"tasks--x", "does not start with 'r'"},
		{"-tasks", "does not start with 'r'"},
		{"r1-train", `round "1": want at least 3 digits`},
		{"r2024-puzzles", `unknown section "puzzles"`},
		{strings.Repeat("a", 65), "no '-'"},
	}
	for _, tt := range tests {
		p, err := ParsePosition(tt.in)
		if err == nil {
			t.Errorf("ParsePosition(%q) = %+v, want an error", tt.in, p)
			continue
		}
		// The message names the position, what is wrong and what is wanted.
		for _, want := range []string{fmt.Sprintf("invalid position %q", tt.in), tt.why, "a position is rNNN-wNN, rNNN-hNN, rNNN-wt, rNNN-ht or r000-t"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("ParsePosition(%q) = %q, want it to say %q", tt.in, err, want)
			}
		}
	}
}

func TestComparePositions(t *testing.T) {
	// The order the planner issues them in; string order would put h
	// before w and w100 before w99.
	order := []string{"r000-t", "r001-w01", "r001-w99", "r001-w100", "r001-wt", "r001-h01", "r001-h02", "r001-ht", "r002-w01", "r1000-w01"}
	shuffled := slices.Clone(order)
	slices.Reverse(shuffled)
	slices.SortFunc(shuffled, func(a, b string) int {
		c, err := ComparePositions(a, b)
		if err != nil {
			t.Fatal(err)
		}
		return c
	})
	if !slices.Equal(shuffled, order) {
		t.Errorf("sorted %v, want %v", shuffled, order)
	}
	if _, err := ComparePositions("r001-w01", "nope"); err == nil {
		t.Error("ComparePositions accepted a bad position")
	}
}

func FuzzParsePosition(f *testing.F) {
	for _, s := range []string{"r000-t", "r003-w02", "r003-wt", "r010-h15", "r003-ht", "r1000-w100", "r003-w00", "x", "r003-w01-rollout"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePosition(s)
		if err != nil {
			return
		}
		// One spelling per position.
		if got := p.String(); got != s {
			t.Fatalf("ParsePosition(%q) = %+v, which formats as %q", s, p, got)
		}
		if p.Compare(p) != 0 {
			t.Fatalf("%q does not compare equal to itself", s)
		}
	})
}

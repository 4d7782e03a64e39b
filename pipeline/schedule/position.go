package schedule

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
)

// Section is the part of a round a position names.
type Section int

// Sections in execution order within a round.
const (
	// SectionInitialTest is the test of the initial (model, harness) pair,
	// "r000-t"; it exists only when no phase could run at all.
	SectionInitialTest Section = iota
	SectionWeight              // "rRRR-wNN"
	SectionWeightTest          // "rRRR-wt"
	SectionHarness             // "rRRR-hNN"
	SectionHarnessTest         // "rRRR-ht"
)

// Pos is a parsed position.
type Pos struct {
	Round   int
	Section Section
	// Index is the 1-based step or iteration for SectionWeight and
	// SectionHarness, 0 otherwise.
	Index int
}

// String formats p: round with at least three digits, index with at least
// two, so the usual runs list in order; longer numbers widen rather than
// wrap, which is why ordering goes through ComparePositions and not string
// order ("h" sorts before "w" anyway).
func (p Pos) String() string {
	switch p.Section {
	case SectionInitialTest:
		return fmt.Sprintf("r%03d-t", p.Round)
	case SectionWeight:
		return fmt.Sprintf("r%03d-w%02d", p.Round, p.Index)
	case SectionWeightTest:
		return fmt.Sprintf("r%03d-wt", p.Round)
	case SectionHarness:
		return fmt.Sprintf("r%03d-h%02d", p.Round, p.Index)
	case SectionHarnessTest:
		return fmt.Sprintf("r%03d-ht", p.Round)
	}
	return fmt.Sprintf("r%03d-?%d", p.Round, p.Section)
}

// Compare orders positions as the planner issues them.
func (p Pos) Compare(q Pos) int {
	return cmp.Or(cmp.Compare(p.Round, q.Round), cmp.Compare(p.Section, q.Section), cmp.Compare(p.Index, q.Index))
}

// positionForms is what ParsePosition accepts, for its error messages.
const positionForms = "rNNN-wNN, rNNN-hNN, rNNN-wt, rNNN-ht or r000-t, e.g. r003-w02"

// ParsePosition parses what Pos.String writes. It is strict: the round is
// "r" and at least three digits, a step or iteration at least two digits
// and not zero, no sign, no spaces, no trailing text. A stage folder is
// "<position>-<stage>"; a position holds exactly one '-', so the folder
// splits after its second field.
//
// This is the one grammar of positions: storage checks only that a
// position is a safe path segment (storage.CheckSegment), so the CLI, the
// planner and readers of stage folders validate positions here. The error
// names the position, what is wrong and the forms wanted.
func ParsePosition(s string) (Pos, error) {
	p, why := parsePosition(s)
	if why != "" {
		return Pos{}, fmt.Errorf("invalid position %q: %s (a position is %s)", s, why, positionForms)
	}
	return p, nil
}

// parsePosition parses s, or says why it is not a position.
func parsePosition(s string) (Pos, string) {
	round, rest, ok := strings.Cut(s, "-")
	switch {
	case !ok:
		return Pos{}, "no '-' between the round and the section"
	case !strings.HasPrefix(round, "r"):
		return Pos{}, "the round does not start with 'r'"
	}
	r, err := digits(round[1:], 3)
	if err != nil {
		return Pos{}, "round " + err.Error()
	}
	p := Pos{Round: r}
	switch {
	case rest == "t":
		if r != 0 {
			return Pos{}, fmt.Sprintf(`the bare test "t" is only the initial pair's, r000-t; the tests of round %d are %s and %s`,
				r, Pos{Round: r, Section: SectionWeightTest}, Pos{Round: r, Section: SectionHarnessTest})
		}
		p.Section = SectionInitialTest
		return p, ""
	case rest == "wt":
		p.Section = SectionWeightTest
	case rest == "ht":
		p.Section = SectionHarnessTest
	case len(rest) > 1 && (rest[0] == 'w' || rest[0] == 'h'):
		p.Section = SectionWeight
		if rest[0] == 'h' {
			p.Section = SectionHarness
		}
		if p.Index, err = digits(rest[1:], 2); err != nil {
			return Pos{}, "index " + err.Error()
		}
		if p.Index == 0 {
			return Pos{}, "steps and iterations count from 1"
		}
	default:
		return Pos{}, fmt.Sprintf("unknown section %q", rest)
	}
	if r == 0 {
		return Pos{}, "rounds count from 1 (r000 is only the initial test r000-t)"
	}
	return p, ""
}

// ComparePositions orders two position strings as the planner issues them;
// it returns an error when either does not parse.
func ComparePositions(a, b string) (int, error) {
	pa, err := ParsePosition(a)
	if err != nil {
		return 0, err
	}
	pb, err := ParsePosition(b)
	if err != nil {
		return 0, err
	}
	return pa.Compare(pb), nil
}

// digits parses a run of at least minWidth ASCII digits; a number wider
// than minWidth may not start with 0, so each value has one spelling.
func digits(s string, minWidth int) (int, error) {
	if len(s) < minWidth {
		return 0, fmt.Errorf("%q: want at least %d digits", s, minWidth)
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q: not a decimal number", s)
		}
	}
	if len(s) > minWidth && s[0] == '0' {
		return 0, fmt.Errorf("%q: leading zero beyond %d digits", s, minWidth)
	}
	if len(s) > 9 {
		return 0, fmt.Errorf("%q: too large", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", s, err)
	}
	return n, nil
}

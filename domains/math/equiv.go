package mathdomain

import (
	"math/big"
	"strings"
)

// maxListItems bounds the items compared one by one; an unordered match is
// quadratic in them.
const maxListItems = 64

// Equivalent reports whether two final answers are the same after
// Normalize:
//
//   - equal normalised text (this is how surds, \pi and expressions
//     compare: \sqrt{12} and 2\sqrt{3} are different answers);
//   - or equal exact values, when both are numbers: integers, decimals and
//     fractions of them (0.5 = \frac{1}{2} = 1/2 = \frac{2}{4} = 0.50). The
//     comparison is exact, with no tolerance: 0.333 is not \frac{1}{3};
//   - or lists of the same length whose items are Equivalent: tuples (…)
//     and intervals […], (…], … item by item with the same brackets; sets
//     \{…\} and bare lists "1, 2" in any order.
//
// An empty answer equals nothing. Equivalent is symmetric.
func Equivalent(a, b string) bool {
	return equivalentNormalized(Normalize(a), Normalize(b), 0)
}

func equivalentNormalized(a, b string, depth int) bool {
	if a == "" || b == "" {
		return false
	}
	if a == b {
		return true
	}
	if x, ok := parseValue(a); ok {
		if y, ok := parseValue(b); ok {
			return x.Cmp(y) == 0
		}
		return false
	}
	if depth > 8 {
		return false
	}
	la, okA := splitList(a)
	lb, okB := splitList(b)
	if !okA || !okB || len(la.items) != len(lb.items) || len(la.items) > maxListItems {
		return false
	}
	if la.ordered || lb.ordered {
		if la.open != lb.open || la.close != lb.close {
			return false
		}
		for i := range la.items {
			if !equivalentItem(la.items[i], lb.items[i], depth) {
				return false
			}
		}
		return true
	}
	// Unordered: match every item of a to a distinct item of b. Greedy
	// matching is exact here because equivalence of items is transitive.
	used := make([]bool, len(lb.items))
	for _, x := range la.items {
		found := false
		for j, y := range lb.items {
			if !used[j] && equivalentItem(x, y, depth) {
				used[j], found = true, true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func equivalentItem(a, b string, depth int) bool {
	return equivalentNormalized(Normalize(a), Normalize(b), depth+1)
}

type list struct {
	open, close string
	ordered     bool
	items       []string
}

// splitList splits a normalised answer at its top-level commas. Brackets
// (), [], (], [) make an ordered tuple or interval; \{\} or no brackets make
// an unordered set. A single item is not a list.
func splitList(s string) (list, bool) {
	var l list
	body := s
	switch {
	case strings.HasPrefix(s, `\{`) && strings.HasSuffix(s, `\}`) && len(s) >= 4:
		l.open, l.close, body = `\{`, `\}`, s[2:len(s)-2]
	case len(s) >= 2 && (s[0] == '(' || s[0] == '[') && (s[len(s)-1] == ')' || s[len(s)-1] == ']'):
		l.open, l.close, l.ordered, body = s[:1], s[len(s)-1:], true, s[1:len(s)-1]
	}
	items, ok := splitTopLevel(body)
	if !ok || len(items) < 2 {
		return l, false
	}
	l.items = items
	return l, true
}

// splitTopLevel splits s at commas outside (), [] and {}; ok=false when the
// brackets do not balance (as in "(1,2),(3,4" cut from "(1,2),(3,4)").
func splitTopLevel(s string) ([]string, bool) {
	var items []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
			if depth < 0 {
				return nil, false
			}
		case ',':
			if depth == 0 {
				items = append(items, s[start:i])
				start = i + 1
			}
		}
	}
	if depth != 0 {
		return nil, false
	}
	return append(items, s[start:]), true
}

// maxNumberLen bounds the numbers parsed exactly, so a boxed wall of digits
// costs no more than a string comparison.
const maxNumberLen = 200

// parseValue reads a normalised number: an integer or decimal, or a
// (signed) \frac of two of them.
func parseValue(s string) (*big.Rat, bool) {
	if len(s) > maxNumberLen {
		return nil, false
	}
	if r, ok := parseDecimal(s); ok {
		return r, true
	}
	neg := false
	if strings.HasPrefix(s, "-") {
		neg, s = true, s[1:]
	}
	if !strings.HasPrefix(s, `\frac{`) {
		return nil, false
	}
	num, next, ok := texArg(s, len(`\frac`))
	if !ok || next >= len(s) || s[next] != '{' {
		return nil, false
	}
	den, end, ok := texArg(s, next)
	if !ok || end != len(s) {
		return nil, false
	}
	n, ok1 := parseDecimal(num)
	d, ok2 := parseDecimal(den)
	if !ok1 || !ok2 || d.Sign() == 0 {
		return nil, false
	}
	q := new(big.Rat).Quo(n, d)
	if neg {
		q.Neg(q)
	}
	return q, true
}

// parseDecimal reads [+-]digits[.digits] only; big.Rat.SetString alone would
// also take exponents such as 1e999999999, which are costly to expand.
func parseDecimal(s string) (*big.Rat, bool) {
	m := numberRE.FindStringSubmatch(s)
	if m == nil || m[2] == "" && m[3] == "" {
		return nil, false
	}
	r, ok := new(big.Rat).SetString(s)
	return r, ok
}

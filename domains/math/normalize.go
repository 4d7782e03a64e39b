package mathdomain

import (
	"regexp"
	"strings"
	"unicode/utf8"
)

// maxNormalize bounds the answers Normalize rewrites. A final answer is a
// few dozen bytes; a longer "answer" is a boxed essay that will not match
// anyway, and leaving it alone keeps Verify linear in the response.
const maxNormalize = 4096

// Normalize rewrites a final answer into the canonical form Equivalent
// compares, following the Minerva/Hendrycks normalisation that the DAPO and
// MATH graders use, with the differences noted below:
//
//   - Math delimiters ($, \(, \), \[, \]) and the dollar sign \$ go;
//     \left, \right, \big…, \displaystyle and the spacing commands \! \, \;
//     \: \quad \qquad, "\ " and ~ go; \dfrac, \tfrac and \cfrac become \frac.
//   - Units: a trailing \text{…} or \mbox{…} goes when something precedes
//     it (5\text{ cm} → 5), other \text{…}, \textbf{…}, \mathrm{…} … keep
//     their content; degrees (^\circ, ^{\circ}, °, \degree) go; a trailing
//     unit word or ordinal suffix after a number goes (5 cm, 30 degrees,
//     12 square units, 5^{th}).
//   - Percent signs go, so 50\% and 50 are the same answer (as in the
//     Hendrycks/Qwen graders; DAPO's Minerva normaliser keeps them apart).
//     50\% is not 0.5.
//   - Whitespace goes, except one space that ends a command name before a
//     letter (\pi r stays \pi r; Minerva would make it \pir).
//   - Equations keep their right side: "x = 5" and "\theta=5" (a short name
//     left of the only "="), and "m+n = 204" (a number right of the last
//     "=", as DAPO's Minerva rule does, but not in lists such as "x=1,y=2").
//   - Thousands separators go when the whole answer is one number (1,000,
//     1{,}000, 1\,000 and 1\!,\!000 are 1000); otherwise commas separate
//     the items of a tuple and stay.
//   - \frac12 → \frac{1}{2}, \sqrt2 → \sqrt{2}; an answer a/b whose sides
//     are numbers, surds or multiples of \pi → \frac{a}{b}; redundant
//     outer braces go, and so do brackets around one number or word:
//     (204) → 204, (A) → A. The Unicode minus sign becomes "-".
//   - A plain number is written canonically: no leading +, no leading or
//     trailing zeros (+05.50 → 5.5, 3.0 → 3, .5 → 0.5, -0 → 0).
//   - A whole-answer fraction carries its sign in front:
//     \frac{-1}{2}, \frac{1}{-2} and -\frac{1}{2} all become -\frac{1}{2}.
//     Fractions are not reduced here; Equivalent compares their values.
//   - A trailing period goes.
//
// Nothing is evaluated: 2^{10} is not 1024, \sqrt{12} is not 2\sqrt{3},
// and the mixed number 2\frac{1}{2} is not \frac{5}{2}. The DAPO and
// Minerva graders do not evaluate either; math_verify's sympy does.
//
// Normalize is idempotent: Normalize(Normalize(x)) == Normalize(x).
func Normalize(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > maxNormalize {
		return s
	}
	// Each rule can expose work for another (unwrapping braces exposes a
	// sign, dropping a unit exposes a period), so run them to a fixed
	// point; real answers settle in two passes.
	for range 16 {
		next := normalizeOnce(s)
		if next == s {
			break
		}
		s = next
	}
	return s
}

func normalizeOnce(s string) string {
	s = strings.TrimSpace(s)
	// U+2212 is the minus sign some models write.
	s = spaceReplacer.Replace(s)

	// Delimiters and dollar signs.
	s = delimReplacer.Replace(s)

	// Presentation-only commands.
	for _, c := range []string{"dfrac", "tfrac", "cfrac"} {
		s = replaceCommand(s, c, `\frac`)
	}
	s = nullDelimReplacer.Replace(s)
	for _, c := range []string{"left", "right", "bigl", "bigr", "Bigl", "Bigr", "biggl", "biggr", "Biggl", "Biggr",
		"big", "Big", "bigg", "Bigg", "displaystyle", "textstyle", "quad", "qquad", "thinspace", "negthinspace"} {
		s = replaceCommand(s, c, "")
	}
	s = spacingReplacer.Replace(s)

	// Text and units.
	s = dropTrailingText(s)
	s = unwrapText(s)
	s = collapseSpace(s)
	s = strings.ReplaceAll(s, "{,}", ",")
	s = degreePercentReplacer.Replace(s)
	s = replaceCommand(s, "degree", "")
	s = dropEquation(s)
	// Units and sentence periods can alternate ("5 cm." or "5.cm"), so peel
	// them together.
	for {
		prev := s
		if m := unitRE.FindStringSubmatch(s); m != nil {
			s = m[1]
		}
		if len(s) > 1 {
			s = strings.TrimRight(s, ".")
		}
		if s == prev {
			break
		}
	}

	// Structure.
	s = braceArgs(s)
	for len(s) >= 2 && s[0] == '{' && matchBrace(s, 0) == len(s)-1 {
		s = strings.TrimSpace(s[1 : len(s)-1])
	}
	if thousandsRE.MatchString(s) {
		s = strings.ReplaceAll(s, ",", "")
	}
	if m := slashRE.FindStringSubmatch(s); m != nil {
		s = m[1] + `\frac{` + m[2] + "}{" + m[3] + "}"
	}
	if m := parenRE.FindStringSubmatch(s); m != nil {
		s = m[1]
	}
	if n, ok := canonicalNumber(s); ok {
		return n
	}
	return canonicalFrac(s)
}

var (
	spaceReplacer         = strings.NewReplacer("\n", " ", "\r", " ", "\t", " ", "\f", " ", "\v", " ", "\u2212", "-")
	delimReplacer         = strings.NewReplacer(`\$`, "", "$", "", `\(`, "", `\)`, "", `\[`, "", `\]`, "")
	nullDelimReplacer     = strings.NewReplacer(`\left.`, "", `\right.`, "")
	spacingReplacer       = strings.NewReplacer(`\!`, "", `\,`, "", `\;`, "", `\:`, "", `\ `, "", "~", "")
	degreePercentReplacer = strings.NewReplacer(`^{\circ}`, "", `^\circ`, "", "°", "", `\%`, "", "%", "")
)

const slashSide = `\d+(?:\.\d+)?|\d*\\sqrt\{\d+\}|\d*\\pi`

var (
	// unitRE matches a unit word after something that ends like a number.
	// Single letters (m, s, g) are left alone: they are as often variables.
	unitRE = regexp.MustCompile(`^(.*[0-9})])(?:square|sq|cubic|units?|cm|mm|km|meters?|metres?|inch(?:es)?|feet|foot|ft|miles?|mph|` +
		`degrees?|deg|radians?|cents?|dollars?|hours?|hrs?|minutes?|mins?|seconds?|secs?|days?|weeks?|years?|` +
		`pounds?|lbs?|grams?|gm|kg|liters?|litres?|ways|points?|students?|people|persons?|th|st|nd|rd|\^\{(?:th|st|nd|rd)\})+(?:\^\{?[23]\}?)?$`)
	thousandsRE = regexp.MustCompile(`^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?$`)
	// slashRE matches a/b of numbers, surds and multiples of pi, which the
	// Hendrycks normaliser also turns into \frac.
	slashRE  = regexp.MustCompile(`^([+-]?)(` + slashSide + `)/(` + slashSide + `)$`)
	numberRE = regexp.MustCompile(`^([+-]?)(\d*)(?:\.(\d*))?$`)
	// parenRE matches one number or word in brackets, (5) or (A), which is
	// not a tuple.
	parenRE = regexp.MustCompile(`^[(\[]([+-]?\d+(?:\.\d+)?|[A-Za-z0-9]+)[)\]]$`)
	// eqNameRE is what may stand left of "=" in an answer like "x=5".
	eqNameRE = regexp.MustCompile(`^(?:[A-Za-z]{1,2}|[A-Za-z]_\{?\w\}?|\\[A-Za-z]+)$`)
)

// replaceCommand replaces the TeX command \name (not \nameX) by repl.
func replaceCommand(s, name, repl string) string {
	cmd := `\` + name
	if !strings.Contains(s, cmd) {
		return s
	}
	var b strings.Builder
	for {
		i := strings.Index(s, cmd)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		after := i + len(cmd)
		b.WriteString(s[:i])
		if after < len(s) && isLetter(s[after]) {
			b.WriteString(cmd)
		} else {
			b.WriteString(repl)
		}
		s = s[after:]
	}
}

// textCommands hold text whose content is kept; unitCommands are the ones
// whose trailing group is a unit.
var (
	textCommands = []string{"text", "textrm", "textbf", "textit", "textnormal", "mathrm", "mathbf", "mathit", "mathsf", "mbox", "operatorname"}
	unitCommands = map[string]bool{"text": true, "textrm": true, "mbox": true, "textnormal": true}
)

// commandGroup finds the command \name{...} starting at s[i] and returns
// the command name and the bounds of its group, or ok=false.
func commandGroup(s string, i int) (name string, open, closeAt int, ok bool) {
	if s[i] != '\\' {
		return "", 0, 0, false
	}
	j := i + 1
	for j < len(s) && isLetter(s[j]) {
		j++
	}
	name = s[i+1 : j]
	for j < len(s) && s[j] == ' ' {
		j++
	}
	if name == "" || j >= len(s) || s[j] != '{' {
		return "", 0, 0, false
	}
	closeAt = matchBrace(s, j)
	return name, j, closeAt, closeAt > 0
}

// dropTrailingText removes a unit written as a trailing \text{…} group, as
// in 5\text{ cm}; an answer that is only text keeps it.
func dropTrailingText(s string) string {
	s = strings.TrimSpace(s)
	for i := len(s) - 1; i > 0; i-- {
		if s[i] != '\\' {
			continue
		}
		name, _, closeAt, ok := commandGroup(s, i)
		if !ok || !unitCommands[name] || closeAt != len(s)-1 {
			continue
		}
		if rest := strings.TrimSpace(s[:i]); rest != "" && !strings.HasSuffix(rest, `\`) {
			return rest
		}
		return s
	}
	return s
}

// unwrapText replaces \text{x} and its kin by x; \text{and} joins items of a
// list, so it becomes a comma.
func unwrapText(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		name, open, closeAt, ok := commandGroup(s, i)
		if !ok || !isTextCommand(name) {
			// Copy an escaped byte as a whole so "\\text" stays.
			b.WriteByte(s[i])
			if i+1 < len(s) && !isLetter(s[i+1]) {
				i++
				b.WriteByte(s[i])
			}
			continue
		}
		inner := unwrapText(s[open+1 : closeAt])
		if strings.TrimSpace(inner) == "and" {
			inner = ","
		}
		b.WriteString(inner)
		i = closeAt
	}
	return b.String()
}

func isTextCommand(name string) bool {
	for _, c := range textCommands {
		if c == name {
			return true
		}
	}
	return false
}

// collapseSpace removes whitespace, keeping one space where it ends a
// command name before a letter (\pi r, not \pir).
func collapseSpace(s string) string {
	if !strings.ContainsAny(s, " ") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != ' ' {
			b.WriteByte(s[i])
			continue
		}
		j := i
		for j < len(s) && s[j] == ' ' {
			j++
		}
		if j < len(s) && isLetter(s[j]) && endsInCommand(b.String()) {
			b.WriteByte(' ')
		}
		i = j - 1
	}
	return b.String()
}

// endsInCommand reports whether s ends with a command name such as \pi
// (and not with an escaped backslash followed by letters, as in \\pi).
func endsInCommand(s string) bool {
	i := len(s)
	for i > 0 && isLetter(s[i-1]) {
		i--
	}
	if i == len(s) {
		return false
	}
	slashes := 0
	for k := i - 1; k >= 0 && s[k] == '\\'; k-- {
		slashes++
	}
	return slashes%2 == 1
}

// dropEquation keeps the right-hand side of an equation: of "x=5" when a
// short name stands left of the only "=" (the Hendrycks rule), and of
// "m+n=204" or "a=b=3" when the last side is a number (the Minerva rule,
// which DAPO applies to every "="). Lists ("x=1,y=2") and inequalities
// ("x<=5") are left alone.
func dropEquation(s string) string {
	i := strings.LastIndexByte(s, '=')
	if i < 0 {
		return s
	}
	left, right := strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+1:])
	if right == "" || strings.HasSuffix(left, "<") || strings.HasSuffix(left, ">") || strings.HasSuffix(left, "!") {
		return s
	}
	if !strings.Contains(left, "=") && eqNameRE.MatchString(left) {
		return right
	}
	if strings.Contains(s, ",") {
		return s
	}
	if _, ok := canonicalNumber(right); ok || slashRE.MatchString(right) {
		return right
	}
	if _, ok := parseValue(right); ok {
		return right
	}
	return s
}

// braceArgs writes the arguments of \frac, \binom and \sqrt in braces:
// \frac12 → \frac{1}{2}, \frac1{72} → \frac{1}{72}, \sqrt3 → \sqrt{3},
// \sqrt[3]2 → \sqrt[3]{2}. Braced arguments are rewritten recursively.
func braceArgs(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			i++
			continue
		}
		j := i + 1
		for j < len(s) && isLetter(s[j]) {
			j++
		}
		name := s[i+1 : j]
		if j == i+1 {
			// An escaped symbol such as \{ or \\.
			j = min(i+2, len(s))
		}
		b.WriteString(s[i:j])
		i = j
		nargs := 0
		switch name {
		case "frac", "binom":
			nargs = 2
		case "sqrt":
			nargs = 1
			k := skipOneSpace(s, i)
			if k < len(s) && s[k] == '[' {
				if e := strings.IndexByte(s[k:], ']'); e > 0 {
					b.WriteString(braceArgs(s[k : k+e+1]))
					i = k + e + 1
				}
			}
		}
		for range nargs {
			arg, next, ok := texArg(s, i)
			if !ok {
				break
			}
			b.WriteString("{" + braceArgs(arg) + "}")
			i = next
		}
	}
	return b.String()
}

// texArg reads one macro argument at s[i]: a braced group (returned without
// its braces), a command name, an escaped symbol or one character.
func texArg(s string, i int) (arg string, next int, ok bool) {
	i = skipOneSpace(s, i)
	if i >= len(s) {
		return "", i, false
	}
	switch c := s[i]; {
	case c == '{':
		e := matchBrace(s, i)
		if e < 0 {
			return "", i, false
		}
		return s[i+1 : e], e + 1, true
	case c == '}' || c == ' ':
		return "", i, false
	case c == '\\':
		j := i + 1
		for j < len(s) && isLetter(s[j]) {
			j++
		}
		if j == i+1 {
			j = min(i+2, len(s))
		}
		return s[i:j], j, true
	default:
		_, size := utf8.DecodeRuneInString(s[i:])
		return s[i : i+size], i + size, true
	}
}

func skipOneSpace(s string, i int) int {
	if i < len(s) && s[i] == ' ' {
		return i + 1
	}
	return i
}

// canonicalNumber writes a plain decimal number canonically, or ok=false.
func canonicalNumber(s string) (string, bool) {
	m := numberRE.FindStringSubmatch(s)
	if m == nil || m[2] == "" && m[3] == "" {
		return "", false
	}
	intPart := strings.TrimLeft(m[2], "0")
	if intPart == "" {
		intPart = "0"
	}
	frac := strings.TrimRight(m[3], "0")
	out := intPart
	if frac != "" {
		out += "." + frac
	}
	if m[1] == "-" && out != "0" {
		out = "-" + out
	}
	return out, true
}

// canonicalFrac moves the signs of a whole-answer fraction to its front:
// \frac{-a}{b} → -\frac{a}{b}, -\frac{a}{-b} → \frac{a}{b}. Numerator and
// denominator must be single terms, so \frac{-1+x}{2} is left alone.
func canonicalFrac(s string) string {
	neg := false
	rest := s
	switch {
	case strings.HasPrefix(rest, "-"):
		neg, rest = true, rest[1:]
	case strings.HasPrefix(rest, "+"):
		rest = rest[1:]
	}
	if !strings.HasPrefix(rest, `\frac{`) {
		return s
	}
	num, next, ok := texArg(rest, len(`\frac`))
	if !ok || next >= len(rest) || rest[next] != '{' {
		return s
	}
	den, end, ok := texArg(rest, next)
	if !ok || end != len(rest) {
		return s
	}
	num, nNeg := splitSign(num)
	den, dNeg := splitSign(den)
	if num == "" || den == "" || hasTopLevelSign(num) || hasTopLevelSign(den) {
		return s
	}
	if n, ok := canonicalNumber(num); ok {
		num = n
	}
	if d, ok := canonicalNumber(den); ok {
		den = d
	}
	out := `\frac{` + num + "}{" + den + "}"
	if neg != nNeg != dNeg && num != "0" {
		out = "-" + out
	}
	return out
}

func splitSign(s string) (string, bool) {
	switch {
	case strings.HasPrefix(s, "-"):
		return s[1:], true
	case strings.HasPrefix(s, "+"):
		return s[1:], false
	}
	return s, false
}

// hasTopLevelSign reports a + or - outside braces, which makes s a sum.
func hasTopLevelSign(s string) bool {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '{':
			depth++
		case '}':
			depth--
		case '+', '-':
			if depth == 0 {
				return true
			}
		}
	}
	return false
}

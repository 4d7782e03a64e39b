package mathdomain

import "strings"

// boxCommands are the TeX commands whose argument is a final answer.
var boxCommands = []string{`\boxed`, `\fbox`}

// Extract returns the content of the last \boxed or \fbox command in s, the
// way the DAPO/Minerva/Qwen-math graders find it:
//
//   - The whole text is scanned as plain text: a box inside prose, inside a
//     Markdown code block or inside a Python string counts like any other.
//     Graders do not parse Markdown, and matching them keeps rewards
//     comparable with published numbers.
//   - The command that starts last wins, so \boxed{\boxed{5}} gives 5 and a
//     response that boxes a draft and then a final answer gives the final
//     one.
//   - \boxed{...} takes a balanced group; \{ and \} are literal braces and
//     do not count. \boxed 5 and \boxed5 (no braces) take the text up to the
//     next $, \], \), line end or unmatched }, as the graders' "\boxed "
//     rule does.
//   - If the last box is unbalanced (a response cut off mid-answer) or empty,
//     nothing is found: an earlier box is not used, since it is most likely
//     a draft the model went on to revise.
//
// The result is always a substring of s, trimmed of surrounding spaces.
func Extract(s string) (string, bool) {
	// One backward pass over the backslashes finds the last box command.
	for from := len(s); from > 0; {
		i := strings.LastIndexByte(s[:from], '\\')
		if i < 0 {
			break
		}
		from = i
		for _, cmd := range boxCommands {
			after := i + len(cmd)
			// \boxedfoo is a different command.
			if strings.HasPrefix(s[i:], cmd) && (after == len(s) || !isLetter(s[after])) {
				return boxArgument(s, after)
			}
		}
	}
	return "", false
}

// boxArgument reads the argument of a box command whose name ends at i.
func boxArgument(s string, i int) (string, bool) {
	j := i
	for j < len(s) && isSpace(s[j]) {
		j++
	}
	if j < len(s) && s[j] == '{' {
		closeAt := matchBrace(s, j)
		if closeAt < 0 {
			return "", false
		}
		return nonEmpty(s[j+1 : closeAt])
	}
	// Brace-less form: the graders take everything up to the end of the
	// math span.
	k, depth := j, 0
loop:
	for ; k < len(s); k++ {
		switch c := s[k]; c {
		case '$', '\n', '\r':
			break loop
		case '{':
			depth++
		case '}':
			// The closing brace of a group the box sits in.
			if depth == 0 {
				break loop
			}
			depth--
		case '\\':
			if k+1 < len(s) && (s[k+1] == ']' || s[k+1] == ')') {
				break loop
			}
			k++
		}
	}
	if k > len(s) {
		k = len(s)
	}
	return nonEmpty(s[j:k])
}

// matchBrace returns the index of the brace closing the group opened at
// s[open], or -1. A backslash escapes the next byte, so \{ and \} are
// literal and \\{ opens a group after a line break.
func matchBrace(s string, open int) int {
	depth := 0
	for k := open; k < len(s); k++ {
		switch s[k] {
		case '\\':
			k++
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return k
			}
		}
	}
	return -1
}

func nonEmpty(s string) (string, bool) {
	s = strings.TrimSpace(s)
	return s, s != ""
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

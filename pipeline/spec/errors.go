package spec

import (
	"fmt"
	"strings"
)

// Error is one problem with an experiment file. Line and Column are 1-based
// and zero when unknown (an Experiment built in Go has no positions).
type Error struct {
	File   string
	Line   int
	Column int
	// Path is the field path, e.g. "rsft.batch_size" or "model.endpoints[1]";
	// empty for problems of the whole file (syntax).
	Path string
	Msg  string
	// Snippet is the offending source line with a caret under the column,
	// for callers that want to show more than one line.
	Snippet string

	// sensitive errors are about a value that may be a secret; they get no
	// snippet, so the source line is never echoed.
	sensitive bool
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
			if e.Column > 0 {
				fmt.Fprintf(&b, ":%d", e.Column)
			}
		}
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ErrorList is every problem found in one experiment file, in source order
// for decoding problems and in field order for validation problems.
type ErrorList []*Error

func (l ErrorList) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// Unwrap lets errors.As find the individual *Error values.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// Detailed renders every error followed by its source snippet, for a
// terminal.
func (l ErrorList) Detailed() string {
	var b strings.Builder
	for _, e := range l {
		b.WriteString(e.Error())
		b.WriteByte('\n')
		if e.Snippet != "" {
			b.WriteString(e.Snippet)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func (l ErrorList) err() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

// snippet returns the source line and a caret under column, or "" when the
// position is outside src.
func snippet(lines []string, line, column int) string {
	if line < 1 || line > len(lines) {
		return ""
	}
	text := strings.TrimRight(lines[line-1], "\r")
	prefix := fmt.Sprintf("%5d | ", line)
	caret := ""
	if column >= 1 && column <= len(text)+1 {
		// Keep tabs so the caret lines up under tab-indented text.
		pad := []byte(text[:column-1])
		for i, c := range pad {
			if c != '\t' {
				pad[i] = ' '
			}
		}
		caret = "\n" + strings.Repeat(" ", len(prefix)) + string(pad) + "^"
	}
	return prefix + text + caret
}

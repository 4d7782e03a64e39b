package importers

import (
	"errors"
	"fmt"
	"strings"
)

// Error is a bad input: where it is and what was expected.
type Error struct {
	File string
	// Line is 1-based; 0 when the format has no lines (Parquet).
	Line int
	// Col is the 1-based byte column within Line; 0 when unknown.
	Col int
	// Row is the 0-based data row of a Parquet file; -1 otherwise.
	Row int64
	// Column names the column (CSV, Parquet) or JSON field at fault.
	Column string
	Msg    string
	// Err is the underlying error, if any (a JSON syntax error, fn's error).
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Col > 0 {
			fmt.Fprintf(&b, ":%d", e.Col)
		}
	}
	if e.Row >= 0 {
		fmt.Fprintf(&b, ": row %d", e.Row)
	}
	b.WriteString(": ")
	b.WriteString(e.Msg)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

func lineErr(file string, line int, format string, args ...any) *Error {
	return &Error{File: file, Line: line, Row: -1, Msg: fmt.Sprintf(format, args...)}
}

func fieldErr(file string, line int, field, format string, args ...any) *Error {
	return &Error{File: file, Line: line, Row: -1, Column: field,
		Msg: fmt.Sprintf("field %q: ", field) + fmt.Sprintf(format, args...)}
}

func rowErr(file string, row int64, column, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	if column != "" {
		msg = "column " + column + ": " + msg
	}
	return &Error{File: file, Row: row, Column: column, Msg: msg}
}

// callbackErr wraps fn's error with the position of the task it refused.
func callbackErr(file string, line int, row int64, err error) *Error {
	return &Error{File: file, Line: line, Row: row, Msg: "task not accepted: " + err.Error(), Err: err}
}

// quote shortens a value for an error message.
func quote(s string) string {
	const max = 80
	if len(s) > max {
		return fmt.Sprintf("%q…", s[:max])
	}
	return fmt.Sprintf("%q", s)
}

// readErr is a failed read at line: past Options.MaxInputBytes an *Error
// (the input's fault), else the error with the position (a cancel, a
// device failing).
func readErr(file string, line int, err error) error {
	var tb *tooBigError
	if errors.As(err, &tb) {
		return lineErr(file, line, "%s", tb.Error())
	}
	return fmt.Errorf("%s:%d: read: %w", file, line, err)
}

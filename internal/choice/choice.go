// Package choice looks rows of a table up by name, and lists the names
// for the error that says a name is unknown: the one way whale's tables
// of extension points (proposers, finetune backends) answer "which
// ones are there".
package choice

import "strings"

// Named is a table row with a name.
type Named interface{ Name() string }

// Names lists the rows' names in the table's order.
func Names[T Named](rows []T) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Name()
	}
	return out
}

// Find returns the row called name.
func Find[T Named](rows []T, name string) (T, bool) {
	for _, r := range rows {
		if r.Name() == name {
			return r, true
		}
	}
	var zero T
	return zero, false
}

// OrList writes names as "a, b or c".
func OrList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

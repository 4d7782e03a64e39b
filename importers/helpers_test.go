package importers

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/whalerun/whale/schemas"
)

// collect returns an fn that appends every task after checking the
// invariants the package doc promises.
func collect(t testing.TB, out *[]schemas.Task) func(schemas.Task) error {
	return func(task schemas.Task) error {
		if msg := invariant(task); msg != "" {
			t.Errorf("task %q breaks the contract: %s", task.ID, msg)
		}
		*out = append(*out, task)
		return nil
	}
}

func invariant(task schemas.Task) string {
	switch {
	case task.ID == "":
		return "empty ID"
	case strings.TrimSpace(task.Question) == "":
		return "empty question"
	case task.Domain == "":
		return "empty domain"
	case len(task.Answers) == 0:
		return "no answers"
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(task.Meta), &m); err != nil || m == nil {
		return "meta is not a JSON object: " + task.Meta
	}
	return ""
}

// wantErr checks that err is an *Error whose text contains every want.
func wantErr(t *testing.T, err error, wants ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %q", wants)
	}
	var ie *Error
	if !errors.As(err, &ie) {
		t.Errorf("error %T is not an *importers.Error: %v", err, err)
	}
	for _, w := range wants {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not contain %q", err.Error(), w)
		}
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("error spans lines: %q", err.Error())
	}
}

func metaOf(t *testing.T, task schemas.Task) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(task.Meta), &m); err != nil {
		t.Fatalf("meta of %s: %v", task.ID, err)
	}
	return m
}

package jobs

import (
	"bytes"
	"testing"

	"github.com/whalerun/whale/importers"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/schemas"
)

// The demo writes these files out for new users: they must stay valid.
func TestEmbeddedExamplesAreValid(t *testing.T) {
	entries, err := Examples.ReadDir("examples")
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) < 2 {
		t.Fatalf("expected the example experiment and sample data, found %d files", len(entries))
	}
	for _, e := range entries {
		data, err := Examples.ReadFile("examples/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case bytes.HasSuffix([]byte(e.Name()), []byte(".yaml")):
			if _, err := spec.Parse(e.Name(), data); err != nil {
				t.Errorf("%s: %v", e.Name(), err)
			}
		case bytes.HasSuffix([]byte(e.Name()), []byte(".csv")):
			n := 0
			err := importers.LichessCSV(t.Context(), bytes.NewReader(data), e.Name(), importers.Options{}, func(schemas.Task) error { n++; return nil })
			if err != nil || n == 0 {
				t.Errorf("%s: %d puzzles, err %v", e.Name(), n, err)
			}
		default:
			t.Errorf("unexpected example file %s: add a validity check for it", e.Name())
		}
	}
}

package stages

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/whalerun/whale/storage"
)

// A stage reads an imported dataset by its key, datasets/<name>; the
// dataset's manifest digest becomes part of the stage's identity, so a
// different dataset under a new name is a different computation.
func TestExecuteReadsDatasetInput(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, "mem://")
	importLines := func(name string, n int) {
		t.Helper()
		dw, prev, err := storage.NewDatasetWriter(ctx, s, name, map[string]any{"n": n}, "test")
		if err != nil || prev != nil {
			t.Fatalf("new dataset %s: prev %v, err %v", name, prev, err)
		}
		pw, err := dw.Create(ctx, "lines", "txt")
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			fmt.Fprintf(pw, "line %d\n", i)
		}
		if _, err := pw.Finish(int64(n)); err != nil {
			t.Fatal(err)
		}
		if _, err := dw.Commit(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	importLines("small", 3)
	importLines("large", 5)

	run := func(key string) Result {
		t.Helper()
		sp := spec("r001-w01", 1, 0)
		sp.Inputs = []InputRef{{Name: "src", Key: key}}
		res, err := Execute(ctx, s, sp, &lines{rows: 1})
		if err != nil {
			t.Fatalf("execute with %s: %v", key, err)
		}
		return res
	}
	res := run("datasets/small")
	if !res.Committed || res.Manifest.Summary["input_rows"] != float64(3) {
		t.Fatalf("read %v input rows from datasets/small, want 3 (committed %v)", res.Manifest.Summary["input_rows"], res.Committed)
	}
	if again := run("datasets/small/_MANIFEST.json"); !again.Skipped {
		t.Fatal("rerun with the same dataset (named by its manifest key) was not a no-op")
	}
	sp := spec("r001-w01", 1, 0)
	sp.Inputs = []InputRef{{Name: "src", Key: "datasets/large"}}
	if _, err := Execute(ctx, s, sp, &lines{rows: 1}); !errors.Is(err, ErrInputsDiffer) {
		t.Fatalf("another dataset at the same position: got %v, want ErrInputsDiffer", err)
	}
	sp.Inputs = []InputRef{{Name: "src", Key: "datasets/missing"}}
	if _, err := Execute(ctx, s, sp, &lines{rows: 1}); !errors.Is(err, ErrInputMissing) {
		t.Fatalf("a dataset never imported: got %v, want ErrInputMissing", err)
	}
}

package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/whalerun/whale/storage"
)

func TestDemoIdempotent(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	var first bytes.Buffer
	if err := runDemo(ctx, demoOptions{Dir: dir}, &first); err != nil {
		t.Fatalf("demo: %v\n%s", err, first.String())
	}
	for _, want := range []string{"initialized run chess-whale", "imported", "datasets/lichess-train", "lease", "table tasks"} {
		if !strings.Contains(first.String(), want) {
			t.Errorf("first demo output lacks %q:\n%s", want, first.String())
		}
	}
	if strings.Contains(first.String(), "nothing to do") {
		t.Errorf("first demo found work done already:\n%s", first.String())
	}

	root := "file://" + filepath.Join(dir, "bucket")
	store := openStore(t, root)
	before := map[string]string{}
	for _, split := range []string{"train", "search", "test"} {
		m, tasks := datasetTasks(t, store, "lichess-"+split)
		if len(tasks) == 0 {
			t.Fatalf("lichess-%s is empty", split)
		}
		for _, task := range tasks {
			if task.Split != split || task.Domain != "chess" {
				t.Errorf("lichess-%s holds %+v", split, task)
			}
		}
		before[split] = m.Digest
	}

	// Again, through the command line: every step is a no-op.
	res := whale(t, "demo", "--dir", dir)
	res.mustCode(t, exitOK)
	if n := strings.Count(res.stdout, "nothing to do"); n != 4 {
		t.Errorf("second demo said \"nothing to do\" %d times, want 4 (three imports, init):\n%s", n, res.stdout)
	}
	if strings.Contains(res.stdout, "imported ") || strings.Contains(res.stdout, "initialized run") {
		t.Errorf("second demo did work again:\n%s", res.stdout)
	}
	for split, digest := range before {
		m, err := storage.ReadDataset(ctx, store, "lichess-"+split)
		if err != nil || m.Digest != digest {
			t.Errorf("lichess-%s changed: %v", split, err)
		}
	}
	whale(t, "demo", "--dir", dir, "extra").mustCode(t, exitUsage, "no arguments")
}

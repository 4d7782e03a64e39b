package main

import (
	"context"
	"log/slog"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

// rolloutAt runs the stand-in rollout at position with samples per task,
// as a new attempt when force is set.
func rolloutAt(t *testing.T, store *storage.Store, position string, samples int, force bool) *storage.Manifest {
	t.Helper()
	res, err := stages.Execute(context.Background(), store, stages.Spec{Run: "chess-whale", Position: position,
		Inputs: []stages.InputRef{{Name: "tasks", Key: storage.DatasetDir("lichess-train")}},
		Config: map[string]any{"group_size": samples}, Seed: 1, Force: force, Log: slog.New(slog.DiscardHandler)},
		rolloutStage{samples})
	if err != nil || !res.Committed {
		t.Fatalf("rollout at %s: %+v %v", position, res, err)
	}
	return res.Manifest
}

func TestGC(t *testing.T) {
	forEachRoot(t, func(t *testing.T, r testRoot) {
		ctx := context.Background()
		whale(t, "init", "--root", r.url, exampleExperiment).mustCode(t, exitOK)
		whale(t, "data", "import", "--root", r.url, "--name", "lichess-train", "--split", "train", puzzlesCSV).mustCode(t, exitOK)
		store := openStore(t, r.url)

		// Attempt 1 of the rollout, superseded by a --force rerun; a stray
		// file in attempt 2 that its manifest does not name; a filter
		// that started and never committed.
		old := rolloutAt(t, store, "r001-w01", 2, false)
		cur := rolloutAt(t, store, "r001-w01", 3, true)
		if cur.Attempt != 2 {
			t.Fatalf("forced rerun wrote attempt %d", cur.Attempt)
		}
		stray := cur.Dir + "/rollouts-00000-of-00001.0123456789ab.parquet"
		if err := store.WriteAll(ctx, stray, []byte("a try that lost")); err != nil {
			t.Fatal(err)
		}
		id, err := storage.NewIdentity("chess-whale", "r001-w01", "filter", []storage.Input{cur.AsInput("rollouts")}, nil, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		pending, err := storage.OpenAttempt(ctx, store, id, storage.AttemptOptions{})
		if err != nil {
			t.Fatal(err)
		}
		before := r.keys(t)
		var oldKeys []string
		for _, k := range before {
			if strings.HasPrefix(k, old.Dir+"/") {
				oldKeys = append(oldKeys, k)
			}
		}
		if len(oldKeys) != 4 {
			t.Fatalf("attempt 1 holds %q", oldKeys)
		}

		// The default age keeps everything this fresh.
		whale(t, "gc", "chess-whale", "--root", r.url).mustCode(t, exitOK, "no garbage older than 72h0m0s in run chess-whale")

		dry := whale(t, "gc", "chess-whale", "--root", r.url, "--older-than", "0s", "--dry-run")
		wants := []string{"KEY", "SIZE", "WHY", stray + "  ", "not in manifest",
			pending.Dir + "/" + storage.InputsName, "uncommitted attempt",
			"would delete 6 object(s)", "(dry run: nothing deleted)"}
		for _, k := range oldKeys {
			wants = append(wants, k)
		}
		dry.mustCode(t, exitOK, append(wants, "superseded by attempt 2")...)
		for _, line := range strings.Split(dry.stdout, "\n") {
			if strings.HasPrefix(line, old.Dir+"/") {
				if !strings.HasPrefix(line, old.Key+" ") {
					t.Errorf("the superseded attempt's manifest is not the first of its objects:\n%s", dry.stdout)
				}
				break
			}
		}
		if after := r.keys(t); !slices.Equal(after, before) {
			t.Fatalf("--dry-run changed the bucket: %q → %q", before, after)
		}

		gc := whale(t, "gc", "--root", r.url, "chess-whale", "--older-than", "0s")
		gc.mustCode(t, exitOK, "deleted 6 object(s)", "from run chess-whale")
		gone := append([]string{stray, pending.Dir + "/" + storage.InputsName}, oldKeys...)
		want := slices.DeleteFunc(slices.Clone(before), func(k string) bool { return slices.Contains(gone, k) })
		if after := r.keys(t); !slices.Equal(after, want) {
			t.Fatalf("after gc the bucket holds %q, want %q", after, want)
		}
		for _, k := range []string{"runs/chess-whale/run.json", "datasets/lichess-train/_MANIFEST.json", cur.Key} {
			if !slices.Contains(want, k) {
				t.Errorf("%s is gone", k)
			}
		}
		if err := storage.Verify(ctx, store, cur, true); err != nil {
			t.Fatalf("the current attempt after gc: %v", err)
		}
		whale(t, "ls", "chess-whale", "--root", r.url).mustCode(t, exitOK, "r001-w01-rollout.a2")
		whale(t, "show", "--root", r.url, "chess-whale/"+path.Base(cur.Dir), "--rows", "1").mustCode(t, exitOK, cur.Digest)
		whale(t, "gc", "chess-whale", "--root", r.url, "--older-than", "0s").mustCode(t, exitOK, "no garbage older than 0s")
	})
}

func TestGCUsage(t *testing.T) {
	t.Setenv("WHALE_ROOT", "")
	root := "file://" + t.TempDir()
	whale(t, "init", "--root", root, exampleExperiment).mustCode(t, exitOK)
	cases := []struct {
		name  string
		args  []string
		wants []string
	}{
		{"no run", []string{"gc", "--root", root}, []string{"want exactly one run name, got 0"}},
		{"two runs", []string{"gc", "a", "b", "--root", root}, []string{"got 2"}},
		{"bad run name", []string{"gc", "no/such", "--root", root}, []string{`invalid run name "no/such"`}},
		{"unknown run", []string{"gc", "nosuch", "--root", root}, []string{`no run "nosuch" in ` + root}},
		{"bad duration", []string{"gc", "chess-whale", "--root", root, "--older-than", "soon"}, []string{"older-than", "soon"}},
		{"negative duration", []string{"gc", "chess-whale", "--root", root, "--older-than", "-1h"}, []string{"--older-than -1h0m0s: want a duration of 0 or more"}},
		{"no root", []string{"gc", "chess-whale"}, []string{"no bucket given"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			whale(t, c.args...).mustCode(t, exitUsage, c.wants...)
		})
	}
}

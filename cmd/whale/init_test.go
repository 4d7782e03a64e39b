package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/whalerun/whale/pipeline/spec"
)

// experimentVariant returns the shipped example with old replaced by new
// (which must occur once) and the 1-based line where the change is.
func experimentVariant(t *testing.T, name, old, new string) (path string, line int) {
	t.Helper()
	data, err := os.ReadFile(exampleExperiment)
	if err != nil {
		t.Fatal(err)
	}
	src := string(data)
	i := strings.Index(src, old)
	if i < 0 || strings.Count(src, old) != 1 {
		t.Fatalf("%q occurs %d times in %s", old, strings.Count(src, old), exampleExperiment)
	}
	line = strings.Count(src[:i], "\n") + 1
	return writeFile(t, name, src[:i]+new+src[i+len(old):]), line
}

var digestRE = regexp.MustCompile(`sha256:[0-9a-f]{64}`)

func TestInit(t *testing.T) {
	forEachRoot(t, func(t *testing.T, r testRoot) {
		ctx := context.Background()

		// Bad experiment files first, so that "nothing written" means an
		// empty bucket.
		unknown, unknownLine := experimentVariant(t, "unknown.yaml", "  threshold: 0.5", "  threshold: 0.5\n  treshold_max: 0.9")
		unknownLine++ // the added line
		wrongType, wrongLine := experimentVariant(t, "wrongtype.yaml", "batch_size: 256", "batch_size: lots")
		bad := []struct {
			name  string
			file  string
			wants []string
		}{
			{"unknown field", unknown, []string{unknown + ":" + strconv.Itoa(unknownLine), "treshold_max"}},
			{"wrong type", wrongType, []string{wrongType + ":" + strconv.Itoa(wrongLine), "batch_size", "lots"}},
			{"missing file", unknown + ".missing", []string{unknown + ".missing"}},
		}
		for _, c := range bad {
			t.Run(c.name, func(t *testing.T) {
				whale(t, "init", "--root", r.url, c.file).mustCode(t, exitUsage, c.wants...)
				if keys := r.keys(t); len(withPrefix(keys, "runs/")) > 0 {
					t.Errorf("a bad experiment file wrote %v", keys)
				}
			})
		}

		// A valid experiment, through the run function.
		var out bytes.Buffer
		if err := runInit(ctx, initOptions{Root: r.url, Experiment: exampleExperiment}, &out); err != nil {
			t.Fatal(err)
		}
		printed := digestRE.FindString(out.String())
		if !strings.Contains(out.String(), "initialized run chess-whale") || printed == "" {
			t.Fatalf("init printed %q", out.String())
		}
		if keys := r.keys(t); !strings.Contains(strings.Join(keys, " "), "runs/chess-whale/run.json") {
			t.Fatalf("bucket holds %v, want runs/chess-whale/run.json", keys)
		}
		store := openStore(t, r.url)
		raw, err := store.ReadAll(ctx, "runs/chess-whale/run.json")
		if err != nil {
			t.Fatal(err)
		}
		run, err := spec.DecodeRun("run.json", raw)
		if err != nil {
			t.Fatal(err)
		}
		if run.SpecDigest != printed {
			t.Errorf("printed digest %s, run.json has %s", printed, run.SpecDigest)
		}
		if want, err := spec.Digest(&run.Spec); err != nil || want != run.SpecDigest {
			t.Errorf("run.json's digest %s does not hash its spec (%s, %v)", run.SpecDigest, want, err)
		}
		if run.Spec.Name != "chess-whale" || run.Spec.Seed != 1 || run.Spec.RSFT.BatchSize != 256 || run.Spec.Domain != "chess" {
			t.Errorf("frozen spec: %+v", run.Spec)
		}

		// Again, through the command line: a no-op.
		whale(t, "init", "--root", r.url, exampleExperiment).mustCode(t, exitOK, "nothing to do", printed)
		// WHALE_ROOT stands for --root.
		t.Setenv("WHALE_ROOT", r.url)
		whale(t, "init", exampleExperiment).mustCode(t, exitOK, "nothing to do")
		if again, _ := store.ReadAll(ctx, "runs/chess-whale/run.json"); !bytes.Equal(again, raw) {
			t.Errorf("run.json was rewritten")
		}

		// A changed spec under the same name is a conflict naming the field.
		seed2, _ := experimentVariant(t, "seed2.yaml", "seed: 1", "seed: 2")
		whale(t, "init", "--root", r.url, seed2).mustCode(t, exitConflict, "chess-whale", "seed")
		threshold, _ := experimentVariant(t, "threshold.yaml", "threshold: 0.5", "threshold: 0.7")
		whale(t, "init", "--root", r.url, threshold).mustCode(t, exitConflict, "rsft.threshold")
		if again, _ := store.ReadAll(ctx, "runs/chess-whale/run.json"); !bytes.Equal(again, raw) {
			t.Errorf("run.json was rewritten by a conflicting init")
		}
		// Under another name it is a new run (flags may follow the file).
		whale(t, "init", seed2, "--root", r.url, "--name", "chess-seed2").mustCode(t, exitOK, "initialized run chess-seed2")
		whale(t, "init", "--root", r.url, "--name", "Bad_Name", seed2).mustCode(t, exitUsage, "name")
	})
}

func TestInitNeedsRoot(t *testing.T) {
	t.Setenv("WHALE_ROOT", "")
	os.Unsetenv("WHALE_ROOT")
	for _, args := range [][]string{
		{"init", exampleExperiment},
		{"data", "import", puzzlesCSV},
		{"ls"},
		{"status", "chess-whale"},
		{"show", "datasets/x"},
	} {
		whale(t, args...).mustCode(t, exitUsage, "--root", "WHALE_ROOT")
	}
	whale(t, "init", "--root", "not a url", exampleExperiment).mustCode(t, exitUsage, "URL")
	whale(t, "init", "--root", "file://relative/dir", exampleExperiment).mustCode(t, exitUsage, "file://")
}

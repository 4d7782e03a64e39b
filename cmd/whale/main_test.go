package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/whalerun/whale/domains/registry"
	"github.com/whalerun/whale/domains/searchqa"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/importers"
	"github.com/whalerun/whale/internal/s3test"
	"github.com/whalerun/whale/pipeline"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/storage"
)

// TestMain stops the versitygw server that the S3 cases share. With
// WHALE_TEST_AS_WHALE set the test binary is whale itself: it runs the
// command line given after "--" as main does, for tests that need whale
// in a process of its own (to kill it).
func TestMain(m *testing.M) {
	if os.Getenv("WHALE_TEST_AS_WHALE") == "1" {
		undumpable()
		args := os.Args[slices.Index(os.Args, "--")+1:]
		err := runApp(context.Background(), os.Stdout, os.Stderr, append([]string{"whale"}, args...))
		if err != nil {
			fmt.Fprintln(os.Stderr, "whale:", err)
		}
		os.Exit(exitCode(err))
	}
	s3test.Main(m)
}

// Shipped inputs, relative to this package.
const (
	exampleExperiment = "../../jobs/examples/chess-whale.yaml"
	puzzlesCSV        = "../../importers/testdata/puzzles.csv"
	puzzlesOldCSV     = "../../importers/testdata/puzzles_old.csv"
)

// testRoot is a fresh, empty bucket and a way to see every object in it
// behind whale's back.
type testRoot struct {
	url  string
	keys func(t *testing.T) []string
}

// forEachRoot runs fn against a fresh file:// root and a fresh bucket on a
// real S3 server (versitygw). The S3 run is skipped only in -short mode
// without a versitygw binary (see internal/s3test).
func forEachRoot(t *testing.T, fn func(t *testing.T, r testRoot)) {
	t.Run("file", func(t *testing.T) { fn(t, fileRoot(t)) })
	t.Run("s3", func(t *testing.T) { fn(t, s3Root(t)) })
}

func fileRoot(t *testing.T) testRoot {
	dir := t.TempDir()
	return testRoot{url: "file://" + dir, keys: func(t *testing.T) []string {
		t.Helper()
		var keys []string
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			keys = append(keys, filepath.ToSlash(rel))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(keys)
		return keys
	}}
}

func s3Root(t *testing.T) testRoot {
	srv := s3test.Shared(t)
	bucket := srv.NewBucket(t)
	return testRoot{url: srv.URL(bucket), keys: func(t *testing.T) []string {
		t.Helper()
		var keys []string
		p := s3.NewListObjectsV2Paginator(srv.Client(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
		for p.HasMorePages() {
			page, err := p.NextPage(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range page.Contents {
				keys = append(keys, aws.ToString(o.Key))
			}
		}
		slices.Sort(keys)
		return keys
	}}
}

// withPrefix returns the keys that start with prefix.
func withPrefix(keys []string, prefix string) []string {
	var out []string
	for _, k := range keys {
		if strings.HasPrefix(k, prefix) {
			out = append(out, k)
		}
	}
	return out
}

func openStore(t *testing.T, url string) *storage.Store {
	t.Helper()
	s, err := storage.Open(context.Background(), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// cliResult is what one whale invocation did.
type cliResult struct {
	stdout, stderr string
	err            error
	code           int
}

// whale runs the command line as main does, minus os.Exit.
func whale(t *testing.T, args ...string) cliResult {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// newApp points slog at errOut; later tests must not log into it.
	defer slog.SetDefault(slog.Default())
	err := runApp(ctx, &out, &errOut, append([]string{"whale"}, args...))
	return cliResult{stdout: out.String(), stderr: errOut.String(), err: err, code: exitCode(err)}
}

// mustCode fails the test unless the invocation ended with code and, on
// failure, an error naming every want on one line.
func (r cliResult) mustCode(t *testing.T, code int, wants ...string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d; err: %v\nstdout:\n%s\nstderr:\n%s", r.code, code, r.err, r.stdout, r.stderr)
	}
	if code == exitOK {
		for _, w := range wants {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("stdout does not contain %q:\n%s", w, r.stdout)
			}
		}
		return
	}
	msg := r.err.Error()
	if strings.Contains(msg, "\n") {
		t.Errorf("error spans several lines:\n%s", msg)
	}
	for _, w := range wants {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not contain %q", msg, w)
		}
	}
}

// writeFile writes content to name in a temporary directory and returns
// its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// verl fixtures, built as verl's datasets.to_parquet would write them.
var (
	verlChat = arrow.ListOf(arrow.StructOf(
		arrow.Field{Name: "role", Type: arrow.BinaryTypes.String, Nullable: true},
		arrow.Field{Name: "content", Type: arrow.BinaryTypes.String, Nullable: true},
	))
	verlFields = []arrow.Field{
		{Name: "data_source", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "prompt", Type: verlChat, Nullable: true},
		{Name: "ability", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "reward_model", Type: arrow.StructOf(
			arrow.Field{Name: "style", Type: arrow.BinaryTypes.String, Nullable: true},
			arrow.Field{Name: "ground_truth", Type: arrow.BinaryTypes.String, Nullable: true},
		), Nullable: true},
		{Name: "extra_info", Type: arrow.StructOf(
			arrow.Field{Name: "index", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
			arrow.Field{Name: "split", Type: arrow.BinaryTypes.String, Nullable: true},
		), Nullable: true},
	}
)

// verlRow is one GSM8K-style row; a nil groundTruth writes a null
// reward_model.
func verlRow(i int, groundTruth *string) string {
	rm := "null"
	if groundTruth != nil {
		rm = fmt.Sprintf(`{"style": "rule", "ground_truth": %q}`, *groundTruth)
	}
	return fmt.Sprintf(`{"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "What is %d + %d?"}], "ability": "math",
 "reward_model": %s, "extra_info": {"index": %d, "split": "train"}}`, i, i, rm, i)
}

// writeVerl writes rows (JSON objects) as a Parquet file of the verl
// layout, leaving out the columns in drop.
func writeVerl(t *testing.T, name string, rows []string, drop ...string) string {
	t.Helper()
	var fields []arrow.Field
	for _, f := range verlFields {
		if !slices.Contains(drop, f.Name) {
			fields = append(fields, f)
		}
	}
	sc := arrow.NewSchema(fields, nil)
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, sc, strings.NewReader("["+strings.Join(rows, ",")+"]"))
	if err != nil {
		t.Fatalf("verl fixture: %v", err)
	}
	defer rec.Release()
	p := filepath.Join(t.TempDir(), name)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd))
	w, err := pqarrow.NewFileWriter(sc, f, props, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExitCode(t *testing.T) {
	base := errors.New("boom")
	cases := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, exitOK},
		{"plain", base, exitFailure},
		{"usage", usageError{base}, exitUsage},
		{"usagef", usagef("bad %s", "flag"), exitUsage},
		{"wrapped usage", fmt.Errorf("ctx: %w", usageError{base}), exitUsage},
		{"conflict", conflictError{base}, exitConflict},
		{"wrapped conflict", fmt.Errorf("ctx: %w", conflictError{base}), exitConflict},
		{"conflict around usage", conflictError{usageError{base}}, exitConflict},
		{"joined", errors.Join(base, usageError{base}), exitUsage},
		// What the packages classify reaches its code however it was
		// wrapped on the way up, with no wrapper in the command.
		{"bad run name", fmt.Errorf("step: %w", storage.CheckRun("a/b")), exitUsage},
		{"bad position segment", storage.CheckSegment("position", "../x"), exitUsage},
		{"invalid key", fmt.Errorf("read: %w", storage.ErrInvalidKey), exitUsage},
		{"unknown domain", func() error { _, err := registry.Get("poker"); return fmt.Errorf("x: %w", err) }(), exitUsage},
		{"experiment file", fmt.Errorf("init: %w", spec.ErrorList{&spec.Error{Path: "name", Msg: "required"}}), exitUsage},
		{"harness", fmt.Errorf("load: %w", &harness.LoadError{File: "h.star"}), exitUsage},
		{"import row", fmt.Errorf("import: %w", &importers.Error{File: "t.jsonl", Line: 3}), exitUsage},
		{"stage inputs differ", fmt.Errorf("rollout at r001-w01: %w", storage.ErrInputsDiffer), exitConflict},
		{"dataset differs", fmt.Errorf("import: %w", storage.ErrDatasetDiffers), exitConflict},
		{"index differs", fmt.Errorf("index: %w", searchqa.ErrIndexDiffers), exitConflict},
		{"spec mismatch", fmt.Errorf("init: %w", spec.ErrSpecMismatch), exitConflict},
		{"not found is a failure", fmt.Errorf("read: %w", storage.ErrNotFound), exitFailure},
		{"a stage's bad harness is a failure", fmt.Errorf("step: %w", &pipeline.StageError{Stage: "rollout", Position: "r001-w01", Err: &harness.LoadError{File: "h.star"}}), exitFailure},
		{"a stage's conflict is a conflict", &pipeline.StageError{Stage: "rollout", Position: "r001-w01", Err: storage.ErrInputsDiffer}, exitConflict},
	}
	for _, c := range cases {
		if got := exitCode(c.err); got != c.want {
			t.Errorf("%s: exitCode(%v) = %d, want %d", c.name, c.err, got, c.want)
		}
	}
}

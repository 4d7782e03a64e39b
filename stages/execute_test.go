package stages

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/whalerun/whale/internal/s3test"
	"github.com/whalerun/whale/storage"
)

// TestMain turns the binary into TestCrashRecovery's child when asked,
// and otherwise runs the tests and stops the versitygw server the S3 runs
// share.
func TestMain(m *testing.M) {
	if root := os.Getenv(crashEnv); root != "" {
		crashChild(root)
	}
	s3test.Main(m)
}

// forEachStore runs fn against a fresh mem://, file:// and S3 (versitygw)
// root. The S3 run is skipped only in -short mode without a versitygw
// binary (see internal/s3test).
func forEachStore(t *testing.T, fn func(t *testing.T, s *storage.Store)) {
	t.Run("mem", func(t *testing.T) { fn(t, openStore(t, "mem://")) })
	t.Run("file", func(t *testing.T) { fn(t, openStore(t, "file://"+t.TempDir())) })
	t.Run("s3", func(t *testing.T) { fn(t, openStore(t, s3test.NewBucketURL(t))) })
}

func openStore(t testing.TB, url string) *storage.Store {
	t.Helper()
	s, err := storage.Open(context.Background(), url, &storage.Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// lines is a test stage: shard i writes Rows lines "<prefix> <shard> <row>"
// to table "lines", reading its input "src" (if any) to count lines.
type lines struct {
	rows   int
	prefix string
	runs   atomic.Int32
	fail   error
	hook   func(x *Exec)
}

func (*lines) Name() string { return "lines" }

func (l *lines) Run(ctx context.Context, x *Exec) error {
	l.runs.Add(1)
	if l.hook != nil {
		l.hook(x)
	}
	var inRows int64
	if in := x.Inputs["src"]; in != nil {
		for _, f := range in.Table("lines") {
			r, err := x.NewReader(ctx, in, f)
			if err != nil {
				return err
			}
			sc := bufio.NewScanner(r)
			for sc.Scan() {
				inRows++
			}
			r.Close()
		}
	}
	w, err := x.Create(ctx, "lines.txt")
	if err != nil {
		return err
	}
	for i := range l.rows {
		fmt.Fprintf(w, "%s %d %d\n", l.prefix, x.Shard, i)
	}
	if l.fail != nil {
		w.Close()
		return l.fail
	}
	w.SetRows(int64(l.rows))
	if err := w.Close(); err != nil {
		return err
	}
	x.SetSummary("rows", l.rows)
	x.SetSummary("input_rows", inRows)
	return nil
}

func spec(pos string, shards, shard int) Spec {
	return Spec{Run: "exp", Position: pos, Config: map[string]any{"g": 4}, Seed: 1, Shards: shards, Shard: shard, Log: quiet}
}

func TestExecuteIdempotent(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		st := &lines{rows: 3, prefix: "a"}
		first, err := Execute(ctx, s, spec("tasks", 1, 0), st)
		if err != nil {
			t.Fatal(err)
		}
		if !first.Committed || !first.CommittedHere || first.Skipped || first.Manifest.Rows("lines") != 3 {
			t.Fatalf("first run: %+v", first)
		}
		again, err := Execute(ctx, s, spec("tasks", 1, 0), st)
		if err != nil {
			t.Fatal(err)
		}
		if !again.Skipped || st.runs.Load() != 1 || again.Manifest.Digest != first.Manifest.Digest {
			t.Fatalf("rerun: %+v (runs %d)", again, st.runs.Load())
		}
		// A couple of object requests: one list and one manifest read.
		r := again.Requests
		if r.Reads+r.Lists+r.Stats > 2 || r.Writes != 0 {
			t.Fatalf("idempotent rerun cost %+v, want ≤ 2 requests and no writes", r)
		}

		// A consumer: one more list and read per input.
		down := spec("r001-w01", 1, 0)
		down.Inputs = []InputRef{{Name: "src", Position: "tasks", Stage: "lines"}}
		c := &lines{rows: 1, prefix: "b"}
		res, err := Execute(ctx, s, down, c)
		if err != nil {
			t.Fatal(err)
		}
		if res.Manifest.Summary["input_rows"] != 3.0 || res.Manifest.Inputs[0].Digest != first.Manifest.Digest {
			t.Fatalf("consumer: %+v", res.Manifest)
		}
		res, err = Execute(ctx, s, down, c)
		if err != nil || !res.Skipped {
			t.Fatalf("consumer rerun: %+v %v", res, err)
		}
		if r := res.Requests; r.Reads+r.Lists+r.Stats > 4 || r.Writes != 0 {
			t.Fatalf("consumer rerun cost %+v, want ≤ 4", r)
		}
	})
}

func TestExecuteInputsDiffer(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		if _, err := Execute(ctx, s, spec("tasks", 1, 0), &lines{rows: 2}); err != nil {
			t.Fatal(err)
		}
		down := spec("r001-w01", 1, 0)
		down.Inputs = []InputRef{{Name: "src", Position: "tasks", Stage: "lines"}}
		first, err := Execute(ctx, s, down, &lines{rows: 1})
		if err != nil {
			t.Fatal(err)
		}

		// The input changes: a forced rerun of the producer writes tasks a2.
		up := spec("tasks", 1, 0)
		up.Force = true
		if res, err := Execute(ctx, s, up, &lines{rows: 5}); err != nil || res.Attempt != 2 {
			t.Fatalf("forced producer: %+v %v", res, err)
		}
		changed := []struct {
			name string
			edit func(*Spec)
			want []string
		}{
			{"input", func(*Spec) {}, []string{"input src: sha256:", "--force", "attempt 2"}},
			{"config", func(sp *Spec) { sp.Config = map[string]any{"g": 8} }, []string{"config.g: 4 → 8"}},
			{"seed", func(sp *Spec) { sp.Seed = 9 }, []string{"seed: 1 → 9"}},
		}
		for _, c := range changed {
			t.Run(c.name, func(t *testing.T) {
				sp := down
				c.edit(&sp)
				st := &lines{rows: 1}
				_, err := Execute(ctx, s, sp, st)
				if !errors.Is(err, ErrInputsDiffer) {
					t.Fatalf("err = %v, want ErrInputsDiffer", err)
				}
				for _, w := range c.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not mention %q", err, w)
					}
				}
				if st.runs.Load() != 0 {
					t.Fatal("the stage ran although its inputs differ")
				}
			})
		}

		forced := down
		forced.Force = true
		res, err := Execute(ctx, s, forced, &lines{rows: 1})
		if err != nil || res.Attempt != 2 || !strings.HasSuffix(res.Folder, "r001-w01-lines.a2") {
			t.Fatalf("forced consumer: %+v %v", res, err)
		}
		if res.Manifest.Summary["input_rows"] != 5.0 {
			t.Fatalf("forced consumer read the old input: %v", res.Manifest.Summary)
		}
		latest, err := storage.LatestCommitted(ctx, s, "exp", "r001-w01", "lines")
		if err != nil || latest.Attempt != 2 {
			t.Fatalf("LatestCommitted: %+v %v", latest, err)
		}
		old, err := storage.ReadManifest(ctx, s, first.Folder)
		if err != nil || old.Digest != first.Manifest.Digest {
			t.Fatalf("old attempt lost: %v", err)
		}
		// An input pinned by key reads that exact attempt, not the latest.
		pinned := down
		pinned.Position = "r001-w02"
		pinned.Inputs = []InputRef{{Name: "src", Key: storage.StagesPrefix("exp") + "tasks-lines/" + storage.ManifestName}}
		if res, err := Execute(ctx, s, pinned, &lines{rows: 1}); err != nil || res.Manifest.Summary["input_rows"] != 2.0 ||
			res.Manifest.Inputs[0].Key != storage.StagesPrefix("exp")+"tasks-lines/"+storage.ManifestName {
			t.Fatalf("pinned input: %+v %v", res.Manifest, err)
		}
		// Now the unforced rerun is a no-op against a2.
		if res, err := Execute(ctx, s, down, &lines{rows: 1}); err != nil || !res.Skipped || res.Attempt != 2 {
			t.Fatalf("rerun after force: %+v %v", res, err)
		}
	})
}

func TestExecuteInputMissing(t *testing.T) {
	s := openStore(t, "mem://")
	sp := spec("r001-w01", 1, 0)
	sp.Inputs = []InputRef{{Name: "src", Position: "tasks", Stage: "lines"}}
	_, err := Execute(context.Background(), s, sp, &lines{})
	if !errors.Is(err, ErrInputMissing) || !errors.Is(err, storage.ErrNotFound) || !strings.Contains(err.Error(), `input "src" (tasks-lines in run exp)`) {
		t.Fatalf("err = %v", err)
	}
}

func TestExecuteShardsOutOfOrder(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		st := &lines{rows: 2}
		order := []int{2, 0, 1}
		for i, sh := range order {
			res, err := Execute(ctx, s, spec("r001-w01", 3, sh), st)
			if err != nil {
				t.Fatal(err)
			}
			last := i == len(order)-1
			if res.Committed != last || res.CommittedHere != last {
				t.Fatalf("after shard %d: %+v", sh, res)
			}
			if !last {
				if _, err := storage.LatestCommitted(ctx, s, "exp", "r001-w01", "lines"); !errors.Is(err, storage.ErrNotFound) {
					t.Fatalf("visible before the last shard: %v", err)
				}
				if len(res.Missing) != len(order)-1-i {
					t.Fatalf("missing %v after %d shards", res.Missing, i+1)
				}
			}
		}
		m, err := storage.LatestCommitted(ctx, s, "exp", "r001-w01", "lines")
		if err != nil || len(m.Files) != 3 || m.Rows("lines") != 6 || m.Summary["rows"] != 6.0 || len(m.Parts) != 3 {
			t.Fatalf("manifest %+v, %v", m, err)
		}
		// Every shard rerun is now a no-op.
		for sh := range 3 {
			if res, err := Execute(ctx, s, spec("r001-w01", 3, sh), st); err != nil || !res.Skipped {
				t.Fatalf("rerun shard %d: %+v %v", sh, res, err)
			}
		}
		if st.runs.Load() != 3 {
			t.Fatalf("stage ran %d times", st.runs.Load())
		}
	})
}

func TestExecuteShardTwice(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		// Shard 1 runs twice at once: the second try starts while the first
		// is inside Run, so both pass the "already committed?" check.
		started := make(chan struct{})
		release := make(chan struct{})
		slow := &lines{rows: 2, prefix: "slow", hook: func(*Exec) { close(started); <-release }}
		errc := make(chan error, 1)
		var slowRes Result
		go func() {
			var err error
			slowRes, err = Execute(ctx, s, spec("r001-w01", 2, 1), slow)
			errc <- err
		}()
		<-started
		fast := &lines{rows: 2, prefix: "fast"}
		res, err := Execute(ctx, s, spec("r001-w01", 2, 1), fast)
		if err != nil || res.ShardLost {
			t.Fatalf("fast try: %+v %v", res, err)
		}
		close(release)
		if err := <-errc; err != nil {
			t.Fatalf("slow try: %v", err)
		}
		if !slowRes.ShardLost || slowRes.Committed {
			t.Fatalf("slow try should report the shard as already committed: %+v", slowRes)
		}
		// A third try sees the part and does not run.
		third := &lines{rows: 2, prefix: "third"}
		res, err = Execute(ctx, s, spec("r001-w01", 2, 1), third)
		if err != nil || !res.ShardSkipped || third.runs.Load() != 0 {
			t.Fatalf("third try: %+v %v", res, err)
		}
		res, err = Execute(ctx, s, spec("r001-w01", 2, 0), &lines{rows: 2, prefix: "zero"})
		if err != nil || !res.CommittedHere {
			t.Fatalf("shard 0: %+v %v", res, err)
		}
		m := res.Manifest
		if len(m.Table("lines")) != 2 {
			t.Fatalf("files %+v", m.Files)
		}
		data, _ := readAll(ctx, s, m, m.Table("lines")[1])
		if !strings.HasPrefix(data, "fast 1 0") {
			t.Fatalf("shard 1 content %q, want the fast try's", data)
		}
		g, err := storage.Garbage(ctx, s, "exp", -1)
		if err != nil || len(g) != 1 || !strings.Contains(g[0].Key, "lines-00001-of-00002.") {
			t.Fatalf("garbage %+v %v: want the slow try's file", g, err)
		}
	})
}

func readAll(ctx context.Context, s *storage.Store, m *storage.Manifest, f storage.FileEntry) (string, error) {
	r, err := m.NewFileReader(ctx, s, f)
	if err != nil {
		return "", err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	return string(b), err
}

func TestExecuteFailureAndResume(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		if _, err := Execute(ctx, s, spec("r001-w01", 2, 0), &lines{rows: 2}); err != nil {
			t.Fatal(err)
		}
		boom := errors.New("boom")
		_, err := Execute(ctx, s, spec("r001-w01", 2, 1), &lines{rows: 2, fail: boom})
		if !errors.Is(err, boom) || !strings.Contains(err.Error(), "shard 1 of 2") {
			t.Fatalf("failing shard: %v", err)
		}
		_, err = Execute(ctx, s, spec("r001-w01", 2, 1), &lines{hook: func(*Exec) { panic("kaboom") }})
		if err == nil || !strings.Contains(err.Error(), "panic: kaboom") {
			t.Fatalf("panicking shard: %v", err)
		}
		// A rerun resumes attempt 1: shard 0 is not run again.
		st := &lines{rows: 2}
		for sh := range 2 {
			res, err := Execute(ctx, s, spec("r001-w01", 2, sh), st)
			if err != nil {
				t.Fatal(err)
			}
			if sh == 0 && !res.ShardSkipped {
				t.Fatalf("shard 0 ran again: %+v", res)
			}
			if sh == 1 && (!res.CommittedHere || res.Attempt != 1) {
				t.Fatalf("shard 1: %+v", res)
			}
		}
		if st.runs.Load() != 1 {
			t.Fatalf("runs = %d", st.runs.Load())
		}
	})
}

func TestFinalize(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		st := &lines{rows: 1}
		for _, sh := range []int{0, 3} {
			if _, err := Execute(ctx, s, spec("r001-w01", 4, sh), st); err != nil {
				t.Fatal(err)
			}
		}
		res, err := Finalize(ctx, s, spec("r001-w01", 4, 0), st)
		if !errors.Is(err, ErrPartsMissing) || fmt.Sprint(res.Missing) != "[1 2]" || !strings.Contains(err.Error(), "shard 1-2") {
			t.Fatalf("finalize: %+v %v", res, err)
		}
		// The shards commit their parts; suppose the last one died before
		// the stage commit: Finalize does it.
		for _, sh := range []int{1, 2} {
			if _, err := Execute(ctx, s, spec("r001-w01", 4, sh), st); err != nil {
				t.Fatal(err)
			}
		}
		res, err = Finalize(ctx, s, spec("r001-w01", 4, 0), st)
		if err != nil || !res.Committed || res.Manifest.Rows("lines") != 4 {
			t.Fatalf("finalize: %+v %v", res, err)
		}
		other := spec("r001-w01", 4, 0)
		other.Seed = 2
		if _, err := Finalize(ctx, s, other, st); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("finalize of an identity never run: %v", err)
		}
	})
}

func TestExecConfigAndInputs(t *testing.T) {
	s := openStore(t, "mem://")
	type cfg struct {
		G    int     `json:"g"`
		Temp float64 `json:"temp"`
	}
	sp := spec("tasks", 1, 0)
	sp.Config = cfg{G: 3, Temp: 0.7}
	var got cfg
	st := &lines{rows: 1, hook: func(x *Exec) {
		if err := x.DecodeConfig(&got); err != nil {
			t.Error(err)
		}
		if _, err := x.Input("nope"); err == nil {
			t.Error("undeclared input accepted")
		}
		if _, err := x.Create(context.Background(), "noext"); err == nil {
			t.Error("Create without an extension accepted")
		}
	}}
	if _, err := Execute(context.Background(), s, sp, st); err != nil {
		t.Fatal(err)
	}
	if got != (cfg{G: 3, Temp: 0.7}) {
		t.Fatalf("config %+v", got)
	}
	if _, err := Execute(context.Background(), s, spec("tasks", 2, 2), st); err == nil {
		t.Fatal("shard 2 of 2 accepted")
	}
}

// An interrupt that arrives once Run has finished must not leave half a
// commit: the commit steps run detached from the caller's context.
func TestCommitSurvivesCancel(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		st := &cancelAfterRun{lines: lines{rows: 2}, cancel: cancel}
		res, err := Execute(ctx, s, spec("r001-w01", 1, 0), st)
		if err != nil || !res.CommittedHere {
			t.Fatalf("execute with ctx cancelled after Run: %+v %v", res, err)
		}
		if _, err := storage.LatestCommitted(context.Background(), s, "exp", "r001-w01", "lines"); err != nil {
			t.Fatal(err)
		}
	})
}

type cancelAfterRun struct {
	lines
	cancel context.CancelFunc
}

func (c *cancelAfterRun) Run(ctx context.Context, x *Exec) error {
	err := c.lines.Run(ctx, x)
	c.cancel()
	return err
}

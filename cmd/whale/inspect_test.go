package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

// rolloutStage is a stand-in rollout: it reads the tasks of its input
// dataset and writes samples rollouts of each to one Parquet rollouts
// file, as the real stage does.
type rolloutStage struct{ samples int }

func (rolloutStage) Name() string { return "rollout" }

func (s rolloutStage) Run(ctx context.Context, x *stages.Exec) error {
	in, err := x.Input("tasks")
	if err != nil {
		return err
	}
	var rows []schemas.Rollout
	for _, f := range in.Table("tasks") {
		ra, err := x.Open(ctx, in, f)
		if err != nil {
			return err
		}
		err = schemas.ReadRows(ctx, ra, ra.Size(), func(task schemas.Task) error {
			for i := range s.samples {
				rows = append(rows, testRollout(x.Run, x.Position, task.ID, i))
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	pw, err := x.Create(ctx, "rollouts.parquet")
	if err != nil {
		return err
	}
	tw, err := schemas.NewWriter[schemas.Rollout](pw, schemas.Rollouts, schemas.WriterOptions{})
	if err != nil {
		return err
	}
	if err := tw.Write(rows...); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if _, err := pw.Finish(tw.Rows()); err != nil {
		return err
	}
	x.SetSummary("episodes", len(rows))
	return nil
}

func testRollout(run, position, taskID string, sample int) schemas.Rollout {
	answer := fmt.Sprintf("answer-%s-%d", taskID, sample)
	return schemas.Rollout{Run: run, Position: position, ModelID: "m0", HarnessID: "h0",
		TaskID: taskID, Sample: int32(sample), Seed: 1, Reward: float64(sample % 2),
		Correct: sample%2 == 1, Answer: answer, FinishReason: "stop", Turns: 1,
		Messages: []schemas.Message{{Role: "user", Content: "q"}, {Role: "assistant", Content: answer}}}
}

// commitRollouts runs the stand-in rollout on a dataset and commits it.
func commitRollouts(t *testing.T, url, run, position, dataset string, samples int) *storage.Manifest {
	t.Helper()
	store := openStore(t, url)
	res, err := stages.Execute(context.Background(), store, stages.Spec{Run: run, Position: position,
		Inputs: []stages.InputRef{{Name: "tasks", Key: storage.DatasetDir(dataset)}},
		Config: map[string]any{"group_size": samples}, Seed: 1, Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		rolloutStage{samples})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Committed {
		t.Fatalf("stage not committed: %+v", res)
	}
	return res.Manifest
}

func TestInspect(t *testing.T) {
	forEachRoot(t, func(t *testing.T, r testRoot) {
		ctx := context.Background()
		whale(t, "init", "--root", r.url, exampleExperiment).mustCode(t, exitOK)
		whale(t, "data", "import", "--root", r.url, "--name", "lichess-train", "--split", "train", puzzlesCSV).mustCode(t, exitOK)

		// Before any stage.
		whale(t, "ls", "--root", r.url, "chess-whale").mustCode(t, exitOK, "(no committed stages yet)")

		ids := csvIDs(t, puzzlesCSV)
		rows := 2 * len(ids)
		m := commitRollouts(t, r.url, "chess-whale", "r001-w01", "lichess-train", 2)
		file := m.Files[0]
		if len(m.Inputs) != 1 || m.Inputs[0].Key != "datasets/lichess-train/_MANIFEST.json" {
			t.Errorf("stage inputs %+v, want the dataset", m.Inputs)
		}

		ls := whale(t, "ls", "--root", r.url)
		ls.mustCode(t, exitOK, "chess-whale", "chess", "whale", "datasets/lichess-train", "tasks=5", "puzzles.csv")
		if regexp.MustCompile(`(?m)^chess-whale\s+chess\s+whale\s+sha256:`).FindString(ls.stdout) == "" {
			t.Errorf("ls does not list the run with domain, schedule and spec:\n%s", ls.stdout)
		}

		lsRun := whale(t, "ls", "chess-whale", "--root", r.url)
		lsRun.mustCode(t, exitOK, "STAGE", "r001-w01-rollout", fmt.Sprintf("rollouts=%d", rows), humanBytes(file.Size))
		if regexp.MustCompile(fmt.Sprintf(`(?m)^r001-w01-rollout\s+1\s+1\s+rollouts=%d\s`, rows)).FindString(lsRun.stdout) == "" {
			t.Errorf("ls RUN line for the stage is not folder, attempt, shards, rows:\n%s", lsRun.stdout)
		}

		show := whale(t, "show", "--root", r.url, "chess-whale/r001-w01-rollout", "--rows", "3")
		show.mustCode(t, exitOK, "stage", m.Dir, "run", "chess-whale", "r001-w01 / rollout", m.Digest, m.InputDigest,
			"input tasks", "datasets/lichess-train/_MANIFEST.json", "summary episodes",
			file.Name, "table rollouts", fmt.Sprintf("%d rows", rows),
			"answer-"+ids[0]+"-0", "answer-"+ids[0]+"-1", "answer-"+ids[1]+"-0", fmt.Sprintf("... %d more rows", rows-3))
		if strings.Contains(show.stdout, "answer-"+ids[1]+"-1") {
			t.Errorf("show --rows 3 printed a fourth row:\n%s", show.stdout)
		}
		// The runs/ and stages/ spellings of the same target, and one attempt.
		for _, target := range []string{"runs/chess-whale/stages/r001-w01-rollout", "chess-whale/r001-w01-rollout/"} {
			whale(t, "show", "--root", r.url, target).mustCode(t, exitOK, m.Digest)
		}
		cols := whale(t, "show", "--root", r.url, "chess-whale/r001-w01-rollout", "-c", "task_id,reward", "-n", "1")
		cols.mustCode(t, exitOK, "task_id", "reward", ids[0])
		if strings.Contains(cols.stdout, "model_id") {
			t.Errorf("--columns task_id,reward printed other columns:\n%s", cols.stdout)
		}

		js := whale(t, "show", "--root", r.url, "--json", "chess-whale/r001-w01-rollout")
		js.mustCode(t, exitOK)
		var got storage.Manifest
		if err := json.Unmarshal([]byte(js.stdout), &got); err != nil {
			t.Fatalf("--json printed no manifest: %v\n%s", err, js.stdout)
		}
		if got.InputDigest != m.InputDigest || len(got.Files) != 1 || got.Files[0] != file || got.Stage != "rollout" {
			t.Errorf("--json manifest %+v, committed %+v", got, m)
		}
		if strings.Contains(js.stdout, "answer-") {
			t.Errorf("--json printed rows")
		}

		// A local copy of the committed file, shown by path.
		store := openStore(t, r.url)
		data, err := store.ReadAll(ctx, m.FileKey(file))
		if err != nil {
			t.Fatal(err)
		}
		local := filepath.Join(t.TempDir(), "rollouts.parquet")
		if err := os.WriteFile(local, data, 0o644); err != nil {
			t.Fatal(err)
		}
		whale(t, "show", local, "-n", "2").mustCode(t, exitOK, "file "+local, "table rollouts, schema v",
			"answer-"+ids[0]+"-1", fmt.Sprintf("... %d more rows", rows-2))

		// Unknown stages and targets are usage errors that say what to do.
		whale(t, "show", "--root", r.url, "chess-whale/r009-w01-rollout").mustCode(t, exitUsage,
			"r009-w01-rollout", "chess-whale", "whale ls chess-whale")
		whale(t, "show", "--root", r.url, "chess-whale/r001-w01-filter").mustCode(t, exitUsage, "r001-w01-filter")
		whale(t, "show", "--root", r.url, "chess-whale/not a folder").mustCode(t, exitUsage, "not a folder")
		whale(t, "show", "--root", r.url, "chess-whale").mustCode(t, exitUsage, "RUN/STAGE")
		whale(t, "show", "--root", r.url, "datasets/nope").mustCode(t, exitUsage, `"nope"`)
		whale(t, "show", "--root", r.url, "chess-whale/r001-w01-rollout", "-c", "nope").mustCode(t, exitUsage, `"nope"`, "task_id")
		whale(t, "ls", "--root", r.url, "no-such-run").mustCode(t, exitUsage, "no-such-run", "whale init")
		whale(t, "status", "--root", r.url, "no-such-run").mustCode(t, exitUsage, "no-such-run")

		// status: the spec, the lease, the data and the stages.
		st := whale(t, "status", "--root", r.url, "chess-whale")
		st.mustCode(t, exitOK, "chess-whale", "chess / whale", "Qwen/Qwen3.5-4B", "free (never taken)",
			"datasets/lichess-train: tasks=5", "datasets/lichess-test: not imported", "committed stages", "r001-w01-rollout")
		lease, err := storage.AcquireLease(ctx, store, "runs/chess-whale/lease", storage.LeaseOptions{Holder: "whale step (test)", TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		host, _ := os.Hostname()
		whale(t, "status", "--root", r.url, "chess-whale").mustCode(t, exitOK,
			`held by "whale step (test)"`, "host "+host, fmt.Sprintf("pid %d", os.Getpid()))
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		whale(t, "status", "--root", r.url, "chess-whale").mustCode(t, exitOK, `free (released by "whale step (test)")`)
	})
}

// A Parquet file written by another tool shows from its footer too.
func TestShowForeignParquet(t *testing.T) {
	gt := "4"
	p := writeVerl(t, "verl.parquet", []string{verlRow(0, &gt), verlRow(1, &gt)})
	whale(t, "show", p).mustCode(t, exitOK, "(not a whale table)", "2 rows", "data_source", "openai/gsm8k")
	whale(t, "show", p+".missing.parquet").mustCode(t, exitUsage, "missing.parquet", "local file")
	notParquet := writeFile(t, "junk.parquet", "not parquet at all")
	whale(t, "show", notParquet).mustCode(t, exitUsage, notParquet)
}

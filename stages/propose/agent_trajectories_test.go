package propose

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

// trajStage runs writeTrajectories as a stage, for its archive inputs.
type trajStage struct {
	ws     string
	dirs   map[string]string
	bounds trajectoryBounds
	stats  trajectoryStats
}

func (*trajStage) Name() string { return "traj" }

func (s *trajStage) Run(ctx context.Context, x *stages.Exec) error {
	var err error
	s.stats, err = writeTrajectories(ctx, x, s.ws, s.dirs, nil, s.bounds)
	return err
}

func readTrajectories(t *testing.T, path string) []trajectory {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []trajectory
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 2*agentEpisodeBytes)
	for sc.Scan() {
		if len(sc.Bytes()) > agentEpisodeBytes {
			t.Fatalf("a line of %d bytes", len(sc.Bytes()))
		}
		var tr trajectory
		if err := json.Unmarshal(sc.Bytes(), &tr); err != nil {
			t.Fatalf("line %d: %v", len(out)+1, err)
		}
		out = append(out, tr)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Every search-set episode of a harness, in archive order, one line
// each; a huge episode clipped; past the file bound outcome only; test
// rows and harnesses without a folder left out.
func TestWriteTrajectories(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		huge := strings.Repeat("long reply ", 300_000) // 3.3 MB
		rolls := []schemas.Rollout{
			{HarnessID: h0ID, TaskID: "t1", Reward: 1, Turns: 2, Messages: []schemas.Message{{Role: "user", Content: "Question: q1"}, {Role: "assistant", Content: "<answer>a</answer>", TokenIDs: []int32{1, 2, 3}}},
				Trace: []schemas.TraceEvent{{Turn: 1, Kind: "hook", Action: "parse_action(...)", Feedback: "answer"}}},
			{HarnessID: h0ID, TaskID: "t2", Reward: 0, Error: "boom", Messages: []schemas.Message{{Role: "assistant", Content: huge}}},
			{HarnessID: h0ID, TaskID: "x9", Section: "test", Messages: []schemas.Message{{Role: "user", Content: "a test question"}}},
			{HarnessID: "sha256:" + strings.Repeat("ab", 32), TaskID: "t1"},
			{HarnessID: h0ID, TaskID: "t3", Reward: 0, FinishReason: "max_turns", Messages: []schemas.Message{{Role: "assistant", Content: strings.Repeat("after the bound ", 400)}}},
		}
		arch := commit(t, s, "r001-h01", &fixture{name: "evaluate", files: map[string]func(io.Writer) (int64, error){
			"rollouts.parquet": parquetOf(schemas.Rollouts, rolls),
		}}, "archive-0")
		st := &trajStage{ws: t.TempDir(), dirs: map[string]string{h0ID: "h0-x"}, bounds: trajectoryBounds{file: 20 << 10, total: 1 << 30}}
		if _, err := stages.Execute(context.Background(), s, stages.Spec{Run: "exp", Position: "r001-h02", Config: map[string]any{}, Seed: 1, Inputs: []stages.InputRef{arch}, Log: quiet}, st); err != nil {
			t.Fatal(err)
		}
		got := readTrajectories(t, filepath.Join(st.ws, "candidates", "h0-x", "trajectories.jsonl"))
		if len(got) != 3 || got[0].TaskID != "t1" || got[1].TaskID != "t2" || got[2].TaskID != "t3" {
			t.Fatalf("trajectories %+v", got)
		}
		first := got[0]
		if first.Reward != 1 || len(first.Messages) != 2 || first.Messages[1].Content != "<answer>a</answer>" || first.Messages[1].TokenIDs != nil ||
			len(first.Trace) != 1 || first.Clipped || first.Omitted != "" {
			t.Errorf("first episode %+v", first)
		}
		if second := got[1]; !second.Clipped || second.Error != "boom" || len(second.Messages[0].Content) > agentClipText+100 || !strings.HasPrefix(second.Messages[0].Content, "long reply") {
			t.Errorf("huge episode: clipped %v, %d bytes", second.Clipped, len(second.Messages[0].Content))
		}
		if third := got[2]; !strings.Contains(third.Omitted, "this file reached its bound of 20480 bytes") || third.Messages != nil || third.FinishReason != "max_turns" {
			t.Errorf("episode past the bound %+v", third)
		}
		if st.stats.files != 1 || st.stats.episodes != 3 || st.stats.omitted != 1 {
			t.Errorf("stats %+v", st.stats)
		}
	})
}

// An episode too long even clipped keeps its outcome.
func TestTrajectoryLineOmits(t *testing.T) {
	msgs := make([]schemas.Message, 200)
	for i := range msgs {
		msgs[i] = schemas.Message{Role: "assistant", Content: strings.Repeat("y", 20<<10)}
	}
	line, err := trajectoryLine(schemas.Rollout{TaskID: "t", Reward: 0.5, Messages: msgs}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var tr trajectory
	if err := json.Unmarshal(line, &tr); err != nil {
		t.Fatal(err)
	}
	if len(line) > agentEpisodeBytes || tr.Messages != nil || !strings.Contains(tr.Omitted, "even with each text cut") || tr.Reward != 0.5 {
		t.Fatalf("%d bytes: %+v", len(line), tr.Omitted)
	}
}

// The proposer never reads a test evaluation: one given as an archive
// input is refused by name.
func TestArchiveRefusesTestEvaluation(t *testing.T) {
	s := openStore(t, "mem://")
	tasks := commitTasks(t, s)
	_, err := stages.Execute(context.Background(), s, stages.Spec{Run: "exp", Position: "r001-t", Config: map[string]any{"mode": "test"}, Seed: 1, Log: quiet},
		evaluateFixture(map[string]int{h0ID: 1}))
	if err != nil {
		t.Fatal(err)
	}
	ref := stages.InputRef{Name: "archive-0", Position: "r001-t", Stage: "evaluate"}
	cfg := Config{Backend: BackendMutate, M: 1, Parent: ParentH0, Iteration: 1, Domain: "fake"}
	_, err = stages.Execute(context.Background(), s, stages.Spec{Run: "exp", Position: "r001-h02", Config: cfg, Seed: 1, Inputs: []stages.InputRef{tasks, ref}, Log: quiet},
		&Stage{Domain: &fakeDomain{}})
	if err == nil || !strings.Contains(err.Error(), "archive-0") || !strings.Contains(err.Error(), "evaluated the test split") {
		t.Fatalf("err %v", err)
	}
}

package trainers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/stages/finetune"
	"github.com/whalerun/whale/storage"
)

var (
	pythonOnce sync.Once
	pythonPath string
	pythonErr  error
)

// python is FindPython's python3 with torch, found once; without one the
// test fails under CI=true and is skipped elsewhere.
func python(t *testing.T) string {
	t.Helper()
	pythonOnce.Do(func() { pythonPath, pythonErr = FindPython("torch") })
	if pythonErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(pythonErr)
		}
		t.Skip(pythonErr)
	}
	return pythonPath
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func TestPythonUnitTests(t *testing.T) {
	py := python(t)
	cmd := exec.CommandContext(t.Context(), py, "-m", "unittest", "discover", "-v", "-s", ".", "-p", "test_*.py")
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1") // no __pycache__ in the source tree
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s -m unittest: %v\n%s", py, err, out)
	}
	if !strings.Contains(string(out), "OK") {
		t.Fatalf("unexpected unittest output:\n%s", out)
	}
	// Only the FSDP test may skip (Debian's torch 1.13 has no FSDP2); any
	// other skip in CI means a path went untested.
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.Contains(line, " ... skipped ") {
			continue
		}
		t.Logf("%s", line)
		if os.Getenv("CI") == "true" && !strings.HasPrefix(line, "test_fsdp ") {
			t.Errorf("skipped in CI: %s", line)
		}
	}
	t.Logf("%s", lastLine(string(out)))
}

func TestEmbeddedFiles(t *testing.T) {
	for _, name := range []string{"train_sft.py", "whale_sft.py", "README.md"} {
		data, err := Files.ReadFile(name)
		if err != nil || len(data) == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// filter commits SFT rows as the filter stage would.
type filter struct{ rows []schemas.SFTExample }

func (*filter) Name() string { return "filter" }

func (f *filter) Run(ctx context.Context, x *stages.Exec) error {
	w, err := x.Create(ctx, "sft.parquet")
	if err != nil {
		return err
	}
	pw, err := schemas.NewWriter[schemas.SFTExample](w, schemas.SFT, schemas.WriterOptions{})
	if err != nil {
		return err
	}
	if err := pw.Write(f.rows...); err != nil {
		return err
	}
	if err := pw.Close(); err != nil {
		return err
	}
	w.SetRows(pw.Rows())
	return w.Close()
}

func rows(n, offset int) []schemas.SFTExample {
	var out []schemas.SFTExample
	for i := range n {
		k := i + offset
		out = append(out, schemas.SFTExample{
			ExampleID: fmt.Sprintf("e%d", k),
			Messages: []schemas.Message{
				{Role: "user", Content: fmt.Sprintf("add %d and 1", k)},
				{Role: "assistant", Content: fmt.Sprintf("<answer>%d</answer>", k+1)},
			},
			TrainMask: []bool{false, true},
		})
	}
	return out
}

type toyEval struct {
	LossBefore float64 `json:"loss_before"`
	LossAfter  float64 `json:"loss_after"`
	BaseLoaded bool    `json:"base_loaded"`
}

// The finetune stage runs train_sft.py (with the toy model standing in
// for transformers) on the JSONL it exported, uploads the saved weights,
// and hands them to the next step as its base.
func TestFinetuneStageRunsReferenceTrainer(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts python with torch twice (~15 s on 2 cores)")
	}
	py := python(t)
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := storage.Open(ctx, "file://"+t.TempDir(), &storage.Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	script, err := filepath.Abs("testdata/toy_trainer.py")
	if err != nil {
		t.Fatal(err)
	}
	cfg := finetune.Config{
		Command:        `"$PYTHON" "$TOY_TRAINER"`,
		Env:            map[string]string{"PYTHON": py, "TOY_TRAINER": script, "PYTHONDONTWRITEBYTECODE": "1"},
		BaseCheckpoint: "toy/base", ModelName: "toy",
		LearningRate: 0.05, Epochs: 2, Reload: finetune.ReloadNone,
	}
	var out strings.Builder
	var mu sync.Mutex
	st := &finetune.Stage{Stdout: writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) })}

	var prev string
	for step, pos := range []string{"r001-w01", "r001-w02"} {
		if _, err := stages.Execute(ctx, s, stages.Spec{Run: "exp", Position: pos, Config: map[string]any{"step": step}, Log: quiet}, &filter{rows: rows(6, 6*step)}); err != nil {
			t.Fatal(err)
		}
		sp := stages.Spec{Run: "exp", Position: pos, Config: cfg, Seed: 1, Log: quiet,
			Inputs: []stages.InputRef{{Name: "sft", Position: pos, Stage: "filter"}}}
		if prev != "" {
			sp.Inputs = append(sp.Inputs, stages.InputRef{Name: "base", Position: prev, Stage: finetune.Name})
		}
		res, err := stages.Execute(ctx, s, sp, st)
		if err != nil {
			t.Fatalf("%s: %v\ntrainer output:\n%s", pos, err, out.String())
		}
		idx := readIndex(t, s, res.Manifest)
		paths := map[string]finetune.IndexFile{}
		for _, f := range idx.Files {
			paths[f.Path] = f
		}
		for _, want := range []string{"model.pt", "tokenizer_config.json", "whale_train_stats.json", "toy_eval.json"} {
			if _, ok := paths[want]; !ok {
				t.Fatalf("%s: checkpoint lacks %s: %+v", pos, want, idx.Files)
			}
		}
		data, err := s.ReadAll(ctx, paths["toy_eval.json"].Key)
		if err != nil {
			t.Fatal(err)
		}
		var ev toyEval
		if err := json.Unmarshal(data, &ev); err != nil {
			t.Fatal(err)
		}
		if !(ev.LossAfter < ev.LossBefore) {
			t.Errorf("%s: loss %v -> %v: training did not lower it", pos, ev.LossBefore, ev.LossAfter)
		}
		if ev.BaseLoaded != (prev != "") {
			t.Errorf("%s: base loaded = %v", pos, ev.BaseLoaded)
		}
		if res.Manifest.Summary[finetune.SumModelID] != "toy@exp/"+pos {
			t.Errorf("%s: summary %v", pos, res.Manifest.Summary)
		}
		t.Logf("%s: loss %.3f -> %.3f, %v files, trainer %.1fs", pos, ev.LossBefore, ev.LossAfter,
			res.Manifest.Summary[finetune.SumCheckpointFiles], res.Manifest.Summary[finetune.SumTrainerSeconds])
		prev = pos
	}
	if !strings.Contains(out.String(), "step 2/2 loss") { // one step per epoch, counted over the run
		t.Errorf("trainer log not streamed:\n%s", out.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func readIndex(t *testing.T, s *storage.Store, m *storage.Manifest) *finetune.Index {
	t.Helper()
	files := m.Table(finetune.TableIndex)
	if len(files) != 1 {
		t.Fatalf("%d index files", len(files))
	}
	data, err := s.ReadAll(context.Background(), m.FileKey(files[0]))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := finetune.DecodeIndex(data)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

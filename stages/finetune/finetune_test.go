package finetune

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/whalerun/whale/internal/s3test"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

func TestMain(m *testing.M) { s3test.Main(m) }

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// forEachStore runs fn against a fresh mem://, file:// and S3 (versitygw)
// root; S3 is skipped only in -short mode without versitygw.
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

// filter stands in for the filter stage: it commits the given SFT rows.
type filter struct{ rows []schemas.SFTExample }

func (*filter) Name() string { return "filter" }

func (f *filter) Run(ctx context.Context, x *stages.Exec) error {
	w, err := x.Create(ctx, "sft.parquet")
	if err != nil {
		return err
	}
	pw, err := schemas.NewWriter[schemas.SFTExample](w, schemas.SFT, schemas.WriterOptions{RowGroupRows: 2})
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

func examples(n int) []schemas.SFTExample {
	var out []schemas.SFTExample
	for i := range n {
		out = append(out, schemas.SFTExample{
			ExampleID: fmt.Sprintf("ex%d", i), EpisodeID: fmt.Sprintf("ep%d", i), TaskID: fmt.Sprintf("t%d", i),
			Messages: []schemas.Message{
				{Role: "system", Content: "be brief"},
				{Role: "user", Content: fmt.Sprintf("what is %d+1?", i)},
				{Role: "assistant", Content: "", Reasoning: fmt.Sprintf("add 1 to %d", i), PromptTokenIDs: []int32{1, 2}, TokenIDs: []int32{3, int32(i)}, ToolCalls: []schemas.ToolCall{{ID: "c1", Name: "calc", Arguments: fmt.Sprintf(`{"x":%d}`, i)}}},
				{Role: "tool", Content: strconv.Itoa(i + 1), ToolCallID: "c1"},
				{Role: "assistant", Content: fmt.Sprintf("<answer>%d</answer>", i+1)},
			},
			TrainMask: []bool{false, false, true, false, true},
		})
	}
	return out
}

func commitSFT(t *testing.T, s *storage.Store, pos string, rows []schemas.SFTExample) {
	t.Helper()
	if _, err := stages.Execute(context.Background(), s, stages.Spec{Run: "exp", Position: pos, Config: map[string]any{"n": len(rows)}, Log: quiet}, &filter{rows: rows}); err != nil {
		t.Fatal(err)
	}
}

// countingTrainer writes a real checkpoint: a model.bin that records what
// the trainer saw, the JSONL it trained on, and the base's model.bin when
// the base is a directory.
const countingTrainer = `set -e
echo "training on $WHALE_SFT_EXAMPLES examples"
n=$(wc -l < "$WHALE_SFT_JSONL")
printf 'lines=%s lr=%s epochs=%s lora=%s/%s/%s reasoning=%s seed=%s at=%s/%s\n' "$n" "$WHALE_LEARNING_RATE" "$WHALE_EPOCHS" \
  "$WHALE_LORA" "$WHALE_LORA_RANK" "$WHALE_LORA_ALPHA" "$WHALE_TRAIN_REASONING" "$WHALE_SEED" "$WHALE_RUN" "$WHALE_POSITION" > "$WHALE_OUTPUT_DIR/model.bin"
mkdir -p "$WHALE_OUTPUT_DIR/data"
cp "$WHALE_SFT_JSONL" "$WHALE_OUTPUT_DIR/data/train.jsonl"
ls "$WHALE_SFT_PARQUET" > "$WHALE_OUTPUT_DIR/data/parquet-files.txt"
echo "$WHALE_BASE_CHECKPOINT" > "$WHALE_OUTPUT_DIR/base.txt"
if [ -d "$WHALE_BASE_CHECKPOINT" ]; then cp "$WHALE_BASE_CHECKPOINT/model.bin" "$WHALE_OUTPUT_DIR/base-model.bin"; fi
echo "extra=$EXTRA" >> "$WHALE_OUTPUT_DIR/model.bin"
echo saved
`

func baseConfig(cmd string) Config {
	return Config{
		Backend: BackendCommand, Command: cmd, Env: map[string]string{"EXTRA": "yes"},
		BaseCheckpoint: "Qwen/Qwen3-4B", ModelName: "qwen",
		LearningRate: 1e-6, Epochs: 1, LoRA: true, LoRARank: 8, LoRAAlpha: 16,
		Reload: ReloadNone,
	}
}

func ftSpec(pos string, cfg Config, base string) stages.Spec {
	sp := stages.Spec{Run: "exp", Position: pos, Config: cfg, Seed: 7, Log: quiet,
		Inputs: []stages.InputRef{{Name: "sft", Position: pos, Stage: "filter"}}}
	if base != "" {
		sp.Inputs = append(sp.Inputs, stages.InputRef{Name: "base", Position: base, Stage: Name})
	}
	return sp
}

// syncBuffer is a goroutine-safe buffer for Stage.Stdout.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func readIndex(t *testing.T, s *storage.Store, m *storage.Manifest) *Index {
	t.Helper()
	files := m.Table(TableIndex)
	if len(files) != 1 {
		t.Fatalf("manifest has %d checkpoint index files", len(files))
	}
	data, err := s.ReadAll(context.Background(), m.FileKey(files[0]))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := DecodeIndex(data)
	if err != nil {
		t.Fatal(err)
	}
	return idx
}

func fileOf(t *testing.T, s *storage.Store, idx *Index, p string) string {
	t.Helper()
	for _, f := range idx.Files {
		if f.Path == p {
			data, err := s.ReadAll(context.Background(), f.Key)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(data)) != f.Size || storage.DigestBytes(data) != f.SHA256 {
				t.Fatalf("%s: size/sha256 differ from the index", p)
			}
			return string(data)
		}
	}
	t.Fatalf("checkpoint has no %s; files %+v", p, idx.Files)
	return ""
}

func TestFinetuneCommandTrainer(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		commitSFT(t, s, "r001-w01", examples(3))
		var out syncBuffer
		st := &Stage{Stdout: &out, WorkDir: t.TempDir()}
		res, err := stages.Execute(ctx, s, ftSpec("r001-w01", baseConfig(countingTrainer), ""), st)
		if err != nil {
			t.Fatal(err)
		}
		m := res.Manifest
		sum := m.Summary
		if sum[SumTrained] != true || sum[SumExamples] != 3.0 || sum[SumAssistantMessages] != 6.0 ||
			sum[SumModelID] != "qwen@exp/r001-w01" || sum[SumCheckpointFiles] != 4.0 {
			t.Fatalf("summary %v", sum)
		}
		if !strings.Contains(out.String(), "training on 3 examples\n") || !strings.Contains(out.String(), "saved\n") {
			t.Fatalf("trainer output not streamed: %q", out.String())
		}
		idx := readIndex(t, s, m)
		if idx.ModelID != "qwen@exp/r001-w01" || !idx.Trained || !idx.LoRA || idx.Base.Checkpoint != "Qwen/Qwen3-4B" {
			t.Fatalf("index %+v", idx)
		}
		var total int64
		for _, f := range idx.Files {
			total += f.Size
			// Every checkpoint file is a file of the committed manifest.
			found := false
			for _, mf := range m.Table(TableFiles) {
				found = found || m.FileKey(mf) == f.Key
			}
			if !found {
				t.Errorf("%s (%s) is not named by the manifest", f.Path, f.Key)
			}
		}
		if sum[SumCheckpointBytes] != float64(total) {
			t.Errorf("checkpoint_bytes %v, files add up to %d", sum[SumCheckpointBytes], total)
		}
		want := "lines=3 lr=1e-06 epochs=1 lora=1/8/16 reasoning=1 seed=7 at=exp/r001-w01\nextra=yes\n"
		if got := fileOf(t, s, idx, "model.bin"); got != want {
			t.Errorf("model.bin = %q, want %q", got, want)
		}
		if got := fileOf(t, s, idx, "base.txt"); got != "Qwen/Qwen3-4B\n" {
			t.Errorf("base = %q: a string base is passed through", got)
		}
		if got := fileOf(t, s, idx, "data/parquet-files.txt"); got != "part-00000.parquet\n" {
			t.Errorf("parquet dir holds %q", got)
		}
		// The JSONL is the chat-messages layout, one example a line.
		sc := bufio.NewScanner(strings.NewReader(fileOf(t, s, idx, "data/train.jsonl")))
		n := 0
		for sc.Scan() {
			var ex JSONLExample
			if err := json.Unmarshal(sc.Bytes(), &ex); err != nil {
				t.Fatal(err)
			}
			if ex.ExampleID != fmt.Sprintf("ex%d", n) || len(ex.Messages) != 5 || len(ex.TrainMask) != 5 ||
				ex.Messages[2].ToolCalls[0].Function.Name != "calc" || ex.Messages[3].ToolCallID != "c1" {
				t.Errorf("line %d: %s", n, sc.Text())
			}
			n++
		}
		if n != 3 {
			t.Errorf("%d JSONL lines, want 3", n)
		}
		// The work directory is removed when no server needs it.
		if left, _ := os.ReadDir(st.WorkDir); len(left) != 0 {
			t.Errorf("work dir left behind: %v", left)
		}
		// An identical rerun trains nothing.
		again, err := stages.Execute(ctx, s, ftSpec("r001-w01", baseConfig("exit 9"), ""), st)
		if err == nil || !errors.Is(err, stages.ErrInputsDiffer) {
			t.Fatalf("changed command must differ: %v", err)
		}
		again, err = stages.Execute(ctx, s, ftSpec("r001-w01", baseConfig(countingTrainer), ""), st)
		if err != nil || !again.Skipped {
			t.Fatalf("rerun: %+v %v", again, err)
		}
	})
}

func TestFinetuneBaseFromPreviousStage(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		st := &Stage{WorkDir: t.TempDir()}
		commitSFT(t, s, "r001-w01", examples(2))
		first, err := stages.Execute(ctx, s, ftSpec("r001-w01", baseConfig(countingTrainer), ""), st)
		if err != nil {
			t.Fatal(err)
		}
		firstIdx := readIndex(t, s, first.Manifest)

		// An empty step carries the base forward without running the trainer.
		commitSFT(t, s, "r001-w02", nil)
		skipped, err := stages.Execute(ctx, s, ftSpec("r001-w02", baseConfig("echo must not run; exit 3"), "r001-w01"), st)
		if err != nil {
			t.Fatal(err)
		}
		if sk := skipped.Manifest.Summary; sk[SumTrained] != false || sk[SumExamples] != 0.0 || sk[SumModelID] != firstIdx.ModelID {
			t.Fatalf("skipped summary %v", sk)
		}
		carried := readIndex(t, s, skipped.Manifest)
		if carried.Trained || carried.ModelID != firstIdx.ModelID || len(carried.Files) != len(firstIdx.Files) || carried.Files[0].Key != firstIdx.Files[0].Key {
			t.Fatalf("carried index %+v, want the files of %+v", carried, firstIdx)
		}

		// The next step downloads the carried checkpoint and trains on it.
		commitSFT(t, s, "r001-w03", examples(1))
		cfg := baseConfig(countingTrainer + `[ "$WHALE_BASE_CHECKPOINT" = "$(dirname "$WHALE_OUTPUT_DIR")/base" ] || { echo "base not in the work dir"; exit 4; }
test -s "$WHALE_BASE_CHECKPOINT/data/train.jsonl"
`)
		third, err := stages.Execute(ctx, s, ftSpec("r001-w03", cfg, "r001-w02"), st)
		if err != nil {
			t.Fatal(err)
		}
		idx := readIndex(t, s, third.Manifest)
		if got, want := fileOf(t, s, idx, "base-model.bin"), fileOf(t, s, firstIdx, "model.bin"); got != want {
			t.Fatalf("the trainer saw base model.bin %q, want %q", got, want)
		}
		if idx.Base.ModelID != "qwen@exp/r001-w01" || idx.Base.Stage != skipped.Manifest.Key || idx.ModelID != "qwen@exp/r001-w03" {
			t.Fatalf("index base %+v model %s", idx.Base, idx.ModelID)
		}
	})
}

func TestFinetuneEmptySFTWithStringBase(t *testing.T) {
	s := openStore(t, "mem://")
	commitSFT(t, s, "r001-w01", nil)
	res, err := stages.Execute(context.Background(), s, ftSpec("r001-w01", baseConfig("exit 3"), ""), &Stage{})
	if err != nil {
		t.Fatal(err)
	}
	idx := readIndex(t, s, res.Manifest)
	if idx.Trained || idx.Checkpoint != "Qwen/Qwen3-4B" || len(idx.Files) != 0 || idx.ModelID != "qwen" || res.Manifest.Summary[SumTrained] != false {
		t.Fatalf("index %+v summary %v", idx, res.Manifest.Summary)
	}
}

func TestFinetuneTrainerFails(t *testing.T) {
	forEachStore(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		commitSFT(t, s, "r001-w01", examples(1))
		cmd := `for i in $(seq 1 30); do echo "step $i"; done; echo "CUDA out of memory" >&2; exit 3`
		_, err := stages.Execute(ctx, s, ftSpec("r001-w01", baseConfig(cmd), ""), &Stage{})
		var ce *CommandError
		if !errors.As(err, &ce) || ce.ExitCode != 3 {
			t.Fatalf("err = %v, want a CommandError with exit code 3", err)
		}
		msg := err.Error()
		for _, w := range []string{"exited with code 3", "CUDA out of memory", "step 30", "step 12"} {
			if !strings.Contains(msg, w) {
				t.Errorf("error does not mention %q:\n%s", w, msg)
			}
		}
		if strings.Contains(msg, "step 11\n") || len(ce.Tail) != tailLines {
			t.Errorf("tail is not the last %d lines: %q", tailLines, ce.Tail)
		}
		if _, err := storage.LatestCommitted(ctx, s, "exp", "r001-w01", Name); !errors.Is(err, storage.ErrNotFound) {
			t.Fatalf("a failed trainer committed: %v", err)
		}
	})
}

func TestFinetuneTrainerWritesNothing(t *testing.T) {
	s := openStore(t, "mem://")
	commitSFT(t, s, "r001-w01", examples(1))
	_, err := stages.Execute(context.Background(), s, ftSpec("r001-w01", baseConfig("echo trained, honest"), ""), &Stage{})
	if err == nil || !strings.Contains(err.Error(), "trainer wrote nothing to $WHALE_OUTPUT_DIR") {
		t.Fatalf("err = %v", err)
	}
	if _, err := storage.LatestCommitted(context.Background(), s, "exp", "r001-w01", Name); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("committed: %v", err)
	}
}

func TestFinetuneModelIDFromTrainer(t *testing.T) {
	s := openStore(t, "mem://")
	commitSFT(t, s, "r001-w01", examples(1))
	cmd := `echo w > "$WHALE_OUTPUT_DIR/model.bin"; echo "qwen-step-1  " > "$WHALE_OUTPUT_DIR/whale_model_id"; env | grep -o '^WHALE_[A-Z_]*='`
	var out syncBuffer
	res, err := stages.Execute(context.Background(), s, ftSpec("r001-w01", baseConfig(cmd), ""), &Stage{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	// The variables the trainer gets are exactly the reserved ones (plus
	// WHALE_* of the test's own environment).
	seen := map[string]bool{}
	for _, l := range strings.Fields(out.String()) {
		k := strings.TrimSuffix(l, "=")
		seen[k] = true
		if _, inherited := os.LookupEnv(k); !reservedEnv[k] && !inherited {
			t.Errorf("the stage sets %s, which Config.Validate does not reserve", k)
		}
	}
	for k := range reservedEnv {
		if !seen[k] && k != "WHALE_CHECKPOINT_DIR" {
			t.Errorf("%s is reserved but not set for the trainer", k)
		}
	}
	if res.Manifest.Summary[SumModelID] != "qwen-step-1" || readIndex(t, s, res.Manifest).ModelID != "qwen-step-1" {
		t.Fatalf("summary %v", res.Manifest.Summary)
	}
}

func TestFinetuneReloadCommand(t *testing.T) {
	s := openStore(t, "mem://")
	commitSFT(t, s, "r001-w01", examples(1))
	mark := filepath.Join(t.TempDir(), "reloaded")
	cfg := baseConfig(countingTrainer)
	cfg.Reload = ReloadCommand
	cfg.Env["MARK"] = mark
	cfg.ReloadCommand = `echo "reloading $WHALE_MODEL_ID"; { echo "$WHALE_MODEL_ID"; head -c 7 "$WHALE_CHECKPOINT_DIR/model.bin"; } > "$MARK"`
	var out syncBuffer
	res, err := stages.Execute(context.Background(), s, ftSpec("r001-w01", cfg, ""), &Stage{Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(mark)
	if err != nil || string(got) != "qwen@exp/r001-w01\nlines=1" || res.Manifest.Summary[SumReloaded] != 1.0 {
		t.Fatalf("reload command wrote %q (%v); summary %v", got, err, res.Manifest.Summary)
	}
	if !strings.Contains(out.String(), "reloading qwen@exp/r001-w01\n") {
		t.Fatalf("reload output not streamed: %q", out.String())
	}

	// A failing reload command fails the stage.
	commitSFT(t, s, "r001-w02", examples(1))
	cfg.ReloadCommand = "echo server down >&2; exit 5"
	_, err = stages.Execute(context.Background(), s, ftSpec("r001-w02", cfg, ""), &Stage{})
	var ce *CommandError
	if !errors.As(err, &ce) || ce.What != "reload command" || ce.ExitCode != 5 || !strings.Contains(err.Error(), "server down") {
		t.Fatalf("err = %v", err)
	}
}

// signalWriter closes ready when it first sees want in the output.
type signalWriter struct {
	syncBuffer
	want  string
	once  sync.Once
	ready chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	n, err := w.syncBuffer.Write(p)
	if strings.Contains(w.String(), w.want) {
		w.once.Do(func() { close(w.ready) })
	}
	return n, err
}

func TestFinetuneCancelKillsTrainer(t *testing.T) {
	s := openStore(t, "mem://")
	commitSFT(t, s, "r001-w01", examples(1))
	pidFile := filepath.Join(t.TempDir(), "pid")
	cfg := baseConfig(`sleep 300 & echo $! > "$PIDFILE"; echo started; sleep 300; echo "not killed" > "$WHALE_OUTPUT_DIR/x"`)
	cfg.Env["PIDFILE"] = pidFile
	w := &signalWriter{want: "started", ready: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-w.ready:
		case <-time.After(20 * time.Second):
		}
		cancel()
	}()
	start := time.Now()
	_, err := stages.Execute(ctx, s, ftSpec("r001-w01", cfg, ""), &Stage{Stdout: w, KillGrace: 2 * time.Second})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if el := time.Since(start); el > 15*time.Second {
		t.Fatalf("cancel took %v", el)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	// The background child of the trainer dies with its process group.
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("trainer's child %d survived the cancel", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := storage.LatestCommitted(context.Background(), s, "exp", "r001-w01", Name); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("committed: %v", err)
	}
}

// alive reports whether pid runs; a zombie waiting for its reaper is dead.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

func TestTrainerArgv(t *testing.T) {
	cases := []struct {
		cfg  Config
		want string
	}{
		{Config{Command: "python3 train.py"}, `["/bin/sh" "-c" "python3 train.py"]`},
		{Config{Command: "torchrun --nproc-per-node 8 t.py", Srun: true, SrunArgs: []string{"--gpus=8", "--ntasks=1"}},
			`["srun" "--gpus=8" "--ntasks=1" "/bin/sh" "-c" "torchrun --nproc-per-node 8 t.py"]`},
		{Config{Command: "x", Srun: true}, `["srun" "/bin/sh" "-c" "x"]`},
	}
	for _, c := range cases {
		if got := fmt.Sprintf("%q", TrainerArgv(c.cfg)); got != c.want {
			t.Errorf("TrainerArgv(%+v) = %s, want %s", c.cfg, got, c.want)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := baseConfig("true")
	cases := []struct {
		name string
		edit func(*Config)
		want string // "" means valid
	}{
		{"good", func(*Config) {}, ""},
		{"backend", func(c *Config) { c.Backend = "torchtune" }, `backend "torchtune"`},
		{"command", func(c *Config) { c.Command = " " }, "command is empty"},
		{"env name", func(c *Config) { c.Env = map[string]string{"A-B": "1"} }, `env "A-B"`},
		{"env reserved", func(c *Config) { c.Env = map[string]string{"WHALE_SEED": "1"} }, `env "WHALE_SEED": set by the stage`},
		{"env trainer's own", func(c *Config) { c.Env = map[string]string{"WHALE_BATCH_SIZE": "64"} }, ""},
		{"base", func(c *Config) { c.BaseCheckpoint = "" }, "base_checkpoint is empty"},
		{"lr", func(c *Config) { c.LearningRate = 0 }, "learning_rate 0"},
		{"epochs", func(c *Config) { c.Epochs = 0 }, "epochs 0"},
		{"lora rank", func(c *Config) { c.LoRARank = 0 }, "lora_rank 0"},
		{"no lora, no rank", func(c *Config) { c.LoRA, c.LoRARank = false, 0 }, ""},
		{"reload", func(c *Config) { c.Reload = "sighup" }, `reload "sighup"`},
		{"reload command", func(c *Config) { c.Reload = ReloadCommand }, "reload_command is empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := good
			cfg.Env = nil
			c.edit(&cfg)
			err := cfg.Validate()
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Fatalf("Validate() = %v, want %q", err, c.want)
			}
		})
	}
}

func TestLoadLoRAURL(t *testing.T) {
	cases := map[string]string{
		"http://h:8000/v1":        "http://h:8000/v1/load_lora_adapter",
		"http://h:8000/v1/":       "http://h:8000/v1/load_lora_adapter",
		"http://h:8000":           "http://h:8000/v1/load_lora_adapter",
		"https://h/proxy/v1?x=1":  "https://h/proxy/v1/load_lora_adapter",
		"ftp://h/v1":              "",
		"not a url":               "",
		"http://user:pw@h:1/v1/":  "http://user:pw@h:1/v1/load_lora_adapter",
		"http://h:8000/custom/v1": "http://h:8000/custom/v1/load_lora_adapter",
	}
	for in, want := range cases {
		got, err := adminURL(in, LoadLoRAPath)
		if want == "" && err == nil || want != "" && (err != nil || got != want) {
			t.Errorf("adminURL(%q) = %q, %v; want %q", in, got, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "pw") {
			t.Errorf("error leaks user info: %v", err)
		}
	}
}

// A trainer that exits but leaves a helper holding its output still
// succeeds, after the grace period, and the helper does not outlive it.
func TestFinetuneTrainerLeavesHelperBehind(t *testing.T) {
	s := openStore(t, "mem://")
	commitSFT(t, s, "r001-w01", examples(1))
	pidFile := filepath.Join(t.TempDir(), "pid")
	cfg := baseConfig(`sleep 300 & echo $! > "$PIDFILE"; echo w > "$WHALE_OUTPUT_DIR/model.bin"`)
	cfg.Env["PIDFILE"] = pidFile
	res, err := stages.Execute(context.Background(), s, ftSpec("r001-w01", cfg, ""), &Stage{KillGrace: 500 * time.Millisecond})
	if err != nil || !res.Committed {
		t.Fatalf("%+v %v", res, err)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("helper %d outlived the trainer", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A trainer killed mid-training finds, on the next attempt at the same
// position, what it saved in $WHALE_RESUME_DIR (the work directory of the
// failed attempt is gone); once training succeeds the directory goes.
func TestFinetuneResumeDirOutlivesAFailedAttempt(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, "mem://")
	commitSFT(t, s, "r001-w01", examples(1))
	work := t.TempDir()
	cmd := `if [ -f "$WHALE_RESUME_DIR/step" ]; then
  echo "resumed at $(cat "$WHALE_RESUME_DIR/step")" > "$WHALE_OUTPUT_DIR/model.bin"
else
  echo 2 > "$WHALE_RESUME_DIR/step"; echo "killed after step 2" >&2; exit 137
fi`
	spec := ftSpec("r001-w01", baseConfig(cmd), "")
	if _, err := stages.Execute(ctx, s, spec, &Stage{WorkDir: work}); err == nil || !strings.Contains(err.Error(), "killed after step 2") {
		t.Fatalf("first attempt: %v, want the trainer's failure", err)
	}
	resume := filepath.Join(work, "whale-finetune-resume-exp-r001-w01")
	if b, err := os.ReadFile(filepath.Join(resume, "step")); err != nil || string(b) != "2\n" {
		t.Fatalf("the resume directory after a failed attempt: %q, %v", b, err)
	}
	if _, err := stages.Execute(ctx, s, spec, &Stage{WorkDir: work}); err != nil {
		t.Fatalf("second attempt: %v", err)
	}
	m, err := storage.LatestCommitted(ctx, s, "exp", "r001-w01", Name)
	if err != nil {
		t.Fatal(err)
	}
	if got := fileOf(t, s, readIndex(t, s, m), "model.bin"); got != "resumed at 2\n" {
		t.Errorf("model.bin = %q, want the second attempt's resume from step 2", got)
	}
	if _, err := os.Stat(resume); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the resume directory is still there after training succeeded: %v", err)
	}
}

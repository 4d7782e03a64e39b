package finetune

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/local"
	"github.com/whalerun/whale/models/localserve"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

var tinyLocal = local.Config{Vocab: local.TokenizerVocab, Layers: 1, DModel: 32, Heads: 4, DFF: 64, Context: 64}

// writeBase saves a fresh tiny model and returns its path.
func writeBase(t *testing.T) (string, *local.Model) {
	t.Helper()
	m, err := local.New(tinyLocal, 1)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "base.whalelm")
	if err := m.Save(p, false); err != nil {
		t.Fatal(err)
	}
	return p, m
}

func localConfig(base string) Config {
	return Config{Backend: BackendLocal, BaseCheckpoint: base, ModelName: "tiny", LearningRate: 1e-2, Epochs: 3,
		Env: map[string]string{"WHALE_BATCH_SIZE": "4"}, Reload: ReloadNone}
}

// repeated is one short exchange n times, plus one row too long for the
// context whose loss lies past it (dropped) and one cut but kept.
func repeated(n int) []schemas.SFTExample {
	var rows []schemas.SFTExample
	for i := range n {
		rows = append(rows, schemas.SFTExample{ExampleID: fmt.Sprintf("ex%d", i), EpisodeID: "e", TaskID: "t",
			Messages:  []schemas.Message{{Role: "user", Content: "2+2?"}, {Role: "assistant", Content: "4"}},
			TrainMask: []bool{false, true}})
	}
	long := strings.Repeat("x", 2*tinyLocal.Context)
	rows = append(rows,
		schemas.SFTExample{ExampleID: "dropped", Messages: []schemas.Message{{Role: "user", Content: long}, {Role: "assistant", Content: "4"}}, TrainMask: []bool{false, true}},
		schemas.SFTExample{ExampleID: "cut", Messages: []schemas.Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: long}}, TrainMask: []bool{false, true}},
	)
	return rows
}

func checkpointOf(t *testing.T, s *storage.Store, idx *Index) *local.Model {
	t.Helper()
	m, err := local.DecodeCheckpoint([]byte(fileOf(t, s, idx, localserve.CheckpointFile)))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestFinetuneLocal(t *testing.T) {
	for _, root := range []string{"mem", "file"} {
		t.Run(root, func(t *testing.T) {
			url := "mem://"
			if root == "file" {
				url = "file://" + t.TempDir()
			}
			s := openStore(t, url)
			ctx := context.Background()
			basePath, base := writeBase(t)
			commitSFT(t, s, "r001-w01", repeated(8))
			st := &Stage{WorkDir: t.TempDir()}
			res, err := stages.Execute(ctx, s, ftSpec("r001-w01", localConfig(basePath), ""), st)
			if err != nil {
				t.Fatal(err)
			}
			sum := res.Manifest.Summary
			// 9 rows in batches of 4: 3 steps an epoch.
			if sum[SumTrained] != true || sum[SumExamples] != 10.0 || sum[SumLocalDropped] != 1.0 || sum[SumLocalCut] != 1.0 || sum[SumLocalSteps] != 9.0 {
				t.Fatalf("summary %v", sum)
			}
			first, last := sum[SumLocalLossFirst].(float64), sum[SumLocalLossLast].(float64)
			if !(last < first) {
				t.Errorf("loss %v after 3 epochs, %v in the first", last, first)
			}
			idx := readIndex(t, s, res.Manifest)
			m := checkpointOf(t, s, idx)
			if want := "tiny@" + m.Digest()[:16]; idx.ModelID != want || sum[SumModelID] != want {
				t.Errorf("model id %q (summary %v), want %q", idx.ModelID, sum[SumModelID], want)
			}
			if m.Digest() == base.Digest() || m.Step() != 9 || len(idx.Files) != 1 {
				t.Errorf("checkpoint step %d, %d files, unchanged %v", m.Step(), len(idx.Files), m.Digest() == base.Digest())
			}

			// The same stage elsewhere trains the same weights.
			s2 := openStore(t, "mem://")
			commitSFT(t, s2, "r001-w01", repeated(8))
			res2, err := stages.Execute(ctx, s2, ftSpec("r001-w01", localConfig(basePath), ""), &Stage{WorkDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if got := res2.Manifest.Summary[SumModelID]; got != idx.ModelID {
				t.Errorf("rerun gave %v, want %s", got, idx.ModelID)
			}

			// Chained: the next step trains from the committed checkpoint.
			commitSFT(t, s, "r001-w02", repeated(4))
			cfg := localConfig("/nonexistent/must-not-be-read")
			cfg.Epochs = 1
			res3, err := stages.Execute(ctx, s, ftSpec("r001-w02", cfg, "r001-w01"), st)
			if err != nil {
				t.Fatal(err)
			}
			idx3 := readIndex(t, s, res3.Manifest)
			m3 := checkpointOf(t, s, idx3)
			if idx3.Base.ModelID != idx.ModelID || m3.Step() != 9+2 || idx3.ModelID == idx.ModelID {
				t.Errorf("chained: base %+v, step %d, id %s", idx3.Base, m3.Step(), idx3.ModelID)
			}
		})
	}
}

// TestFinetuneLocalReload: the vllm-lora hand-off to whale's own server
// makes the new weights answer under the new model id.
func TestFinetuneLocalReload(t *testing.T) {
	s := openStore(t, "mem://")
	basePath, base := writeBase(t)
	// The server loads adapters only from the stage's work directory.
	work := t.TempDir()
	srv, err := localserve.New(base, localserve.Options{Name: "tiny", Log: quiet, AdapterDir: work})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ts := httptest.NewServer(srv)
	defer ts.Close()

	commitSFT(t, s, "r001-w01", repeated(8))
	cfg := localConfig(basePath)
	cfg.Epochs = 20
	cfg.Reload = ReloadVLLMLoRA
	st := &Stage{WorkDir: work, ReloadEndpoints: []string{ts.URL + "/v1"}}
	res, err := stages.Execute(context.Background(), s, ftSpec("r001-w01", cfg, ""), st)
	if err != nil {
		t.Fatal(err)
	}
	id := res.Manifest.Summary[SumModelID].(string)
	if res.Manifest.Summary[SumReloaded] != 1.0 {
		t.Fatalf("summary %v", res.Manifest.Summary)
	}
	c, err := models.New(models.Config{Endpoints: []string{ts.URL + "/v1"}, Model: id})
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Chat(context.Background(), models.Request{Messages: []schemas.Message{{Role: "user", Content: "2+2?"}},
		Sampling: models.Sampling{Temperature: models.Ptr(0.0), MaxTokens: models.Ptr(int64(8))}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Model != id || r.Content != "4" {
		t.Errorf("fine-tuned model answered %q as %q, want 4 as %s", r.Content, r.Model, id)
	}
}

func TestLocalExampleMask(t *testing.T) {
	msgs := []schemas.Message{{Role: "system", Content: "s"}, {Role: "user", Content: "u"}, {Role: "assistant", Content: "ab"}, {Role: "user", Content: "v"}, {Role: "assistant", Content: "cd"}}
	cases := []struct {
		mask []bool
		want string // the masked tokens, as bytes and <|end|> = $
	}{
		{[]bool{false, false, true, false, true}, "ab$cd$"},
		{[]bool{false, false, false, false, true}, "cd$"},
		{[]bool{false, false, true, false, false}, "ab$"},
		{[]bool{false, false, false, false, false}, ""},
	}
	for _, c := range cases {
		ex, err := LocalExample(schemas.SFTExample{Messages: msgs, TrainMask: c.mask})
		if err != nil {
			t.Fatal(err)
		}
		var got strings.Builder
		for i, id := range ex.Tokens {
			if !ex.Mask[i] {
				continue
			}
			if id == local.TokEnd {
				got.WriteByte('$')
			} else {
				got.WriteByte(byte(id))
			}
		}
		if got.String() != c.want {
			t.Errorf("mask %v: trained on %q, want %q", c.mask, got.String(), c.want)
		}
	}
	if _, err := LocalExample(schemas.SFTExample{Messages: msgs, TrainMask: []bool{true}}); err == nil {
		t.Error("short train_mask accepted")
	}

	// With tools the context starts with the turn listing them, as the
	// server rendered it at rollout; it carries no loss.
	tools := `[{"type":"function","function":{"name":"search","parameters":{"type":"object"}}}]`
	calls := []schemas.Message{{Role: "user", Content: "u"}, {Role: "assistant", ToolCalls: []schemas.ToolCall{{ID: "c1", Name: "search", Arguments: `{"q":"x"}`}}},
		{Role: "tool", Content: "r", ToolCallID: "c1"}, {Role: "assistant", Content: "ab"}}
	ex, err := LocalExample(schemas.SFTExample{Messages: calls, TrainMask: []bool{false, true, false, true}, Tools: tools})
	if err != nil {
		t.Fatal(err)
	}
	lt, _ := local.ToolsFromJSON(tools)
	want, _, _ := local.EncodeTools(calls, lt, false)
	if !slices.Equal(ex.Tokens, want) {
		t.Fatalf("tokens differ from the server's rendering")
	}
	var trained strings.Builder
	for i, id := range ex.Tokens {
		if ex.Mask[i] && id < 256 {
			trained.WriteByte(byte(id))
		}
	}
	if got := trained.String(); !strings.Contains(got, `"name":"search"`) || !strings.HasSuffix(got, "ab") || !strings.HasPrefix(got, "<tool_call>") || strings.Contains(got, "<tools>") {
		t.Errorf("trained on %q", got)
	}
	if _, err := LocalExample(schemas.SFTExample{Messages: calls, TrainMask: []bool{false, true, false, true}, Tools: "{"}); err == nil {
		t.Error("tools that are not JSON accepted")
	}
}

func TestLocalConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"ok", func(*Config) {}, ""},
		{"lora", func(c *Config) { c.LoRA, c.LoRARank, c.LoRAAlpha = true, 8, 16 }, "trains all weights"},
		{"batch", func(c *Config) { c.Env["WHALE_BATCH_SIZE"] = "0" }, "WHALE_BATCH_SIZE"},
		{"no base", func(c *Config) { c.BaseCheckpoint = "" }, "base_checkpoint"},
	}
	for _, c := range cases {
		cfg := localConfig("/x")
		c.edit(&cfg)
		err := cfg.Validate()
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

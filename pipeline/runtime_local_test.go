package pipeline

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/local"
	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/stages/finetune"
	"github.com/whalerun/whale/storage"
)

// TestRuntimeLocalProvider: provider local serves model.checkpoint in
// process, the client answers through it, and Close stops the server.
func TestRuntimeLocalProvider(t *testing.T) {
	m, err := local.New(local.Config{Vocab: local.TokenizerVocab, Layers: 1, DModel: 16, Heads: 2, DFF: 32, Context: 64}, 1)
	if err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(t.TempDir(), "base.whalelm")
	if err := m.Save(ckpt, false); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	exp := &spec.Experiment{Domain: "chess", Model: spec.Model{Provider: spec.ProviderLocal, Name: "tiny", Checkpoint: ckpt}}
	rt, err := NewRuntime(ctx, nil, exp, RuntimeOptions{Log: discard})
	if err != nil {
		t.Fatal(err)
	}
	if len(rt.ModelEndpoints) != 1 || !strings.HasPrefix(rt.ModelEndpoints[0], "http://127.0.0.1:") {
		t.Fatalf("endpoints %v", rt.ModelEndpoints)
	}
	r, err := rt.Model.Chat(ctx, chatReq("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Model != "tiny" || r.PromptTokens == 0 {
		t.Errorf("answer from %q with %d prompt tokens", r.Model, r.PromptTokens)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 2e9)
	defer cancel()
	if _, err := rt.Model.Chat(cctx, chatReq("again")); err == nil {
		t.Error("the server still answers after Close")
	}

	exp.Model.Checkpoint = filepath.Join(t.TempDir(), "missing")
	if _, err := NewRuntime(ctx, nil, exp, RuntimeOptions{Log: discard}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("missing checkpoint: %v", err)
	}
}

func chatReq(s string) models.Request {
	return models.Request{Messages: []schemas.Message{{Role: "user", Content: s}},
		Sampling: models.Sampling{MaxTokens: models.Ptr(int64(4)), Seed: models.Ptr(int64(1))}}
}

// sftRows commits SFT rows as a filter stage would.
type sftRows struct{ rows []schemas.SFTExample }

func (*sftRows) Name() string { return StageFilter }

func (f *sftRows) Run(ctx context.Context, x *stages.Exec) error {
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

// TestRuntimeLocalResolvesRunCheckpoints: a fresh runtime (a restart)
// serves a model id that a committed finetune stage of the run made.
func TestRuntimeLocalResolvesRunCheckpoints(t *testing.T) {
	ctx := context.Background()
	s, err := storage.Open(ctx, "mem://", &storage.Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	m, err := local.New(local.Config{Vocab: local.TokenizerVocab, Layers: 1, DModel: 16, Heads: 2, DFF: 32, Context: 64}, 1)
	if err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(t.TempDir(), "base.whalelm")
	if err := m.Save(ckpt, false); err != nil {
		t.Fatal(err)
	}
	row := schemas.SFTExample{ExampleID: "a", Messages: []schemas.Message{{Role: "user", Content: "q"}, {Role: "assistant", Content: "ok"}}, TrainMask: []bool{false, true}}
	if _, err := stages.Execute(ctx, s, stages.Spec{Run: "exp", Position: "r001-w01", Config: map[string]any{}, Log: discard}, &sftRows{rows: []schemas.SFTExample{row}}); err != nil {
		t.Fatal(err)
	}
	res, err := stages.Execute(ctx, s, stages.Spec{Run: "exp", Position: "r001-w01", Seed: 1, Log: discard,
		Config: finetune.Config{Backend: finetune.BackendLocal, BaseCheckpoint: ckpt, ModelName: "tiny", LearningRate: 1e-3, Epochs: 1},
		Inputs: []stages.InputRef{{Name: "sft", Position: "r001-w01", Stage: StageFilter}}}, &finetune.Stage{WorkDir: t.TempDir(), Log: discard})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Manifest.Summary[finetune.SumModelID].(string)

	exp := &spec.Experiment{Domain: "chess", Model: spec.Model{Provider: spec.ProviderLocal, Name: "tiny", Checkpoint: ckpt}}
	rt, err := NewRuntime(ctx, s, exp, RuntimeOptions{Log: discard, Run: "exp"})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	for _, c := range []struct{ name, want string }{{id, id}, {"tiny@0000000000000000", "404"}} {
		cl, err := models.New(models.Config{Endpoints: rt.ModelEndpoints, Model: c.name, Retry: models.RetryPolicy{Attempts: 1}})
		if err != nil {
			t.Fatal(err)
		}
		r, err := cl.Chat(ctx, chatReq("q"))
		switch {
		case c.want == "404":
			if err == nil || !strings.Contains(err.Error(), "404") {
				t.Errorf("%s: %v, want a 404", c.name, err)
			}
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
		case r.Model != c.want:
			t.Errorf("%s answered as %s", c.name, r.Model)
		}
	}
}

// WHALE_MODEL_ENDPOINTS points this process's stages at other servers
// (a vLLM that a Slurm job started), leaving the spec alone.
func TestEndpointsFromTheEnvironment(t *testing.T) {
	srv := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: "from the job's server"}))
	exp, err := spec.Parse("e.yaml", []byte("name: e\ndomain: math\nschedule: weights-only\ndata: {train: datasets/t}\n"+
		"eval: {test_every_phase: false}\nmodel: {name: m, endpoints: ['http://127.0.0.1:9/v1']}\nfinetune: {command: x, reload: none}\nbudget: {weight_steps: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(EndpointsEnv, srv.URL)
	rt, err := NewRuntime(context.Background(), nil, exp, RuntimeOptions{Log: discard})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	resp, err := rt.Model.Chat(context.Background(), models.Request{Messages: []schemas.Message{{Role: "user", Content: "hi"}}})
	if err != nil || resp.Content != "from the job's server" {
		t.Fatalf("chat: %v, %+v", err, resp)
	}
	if len(rt.ModelEndpoints) != 1 || rt.ModelEndpoints[0] != srv.URL || exp.Model.Endpoints[0] != "http://127.0.0.1:9/v1" {
		t.Errorf("reload endpoints %v, spec endpoints %v", rt.ModelEndpoints, exp.Model.Endpoints)
	}
}

// TestRuntimeLocalFromInitCopy: a node without the checkpoint at its path
// serves init's copy from the bucket, checked against its digest.
func TestRuntimeLocalFromInitCopy(t *testing.T) {
	m, err := local.New(local.Config{Vocab: local.TokenizerVocab, Layers: 1, DModel: 16, Heads: 2, DFF: 32, Context: 64}, 1)
	if err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(t.TempDir(), "base.whalelm")
	if err := m.Save(ckpt, false); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s, err := storage.Open(ctx, "mem://", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	exp := &spec.Experiment{Domain: "chess", Model: spec.Model{Provider: spec.ProviderLocal, Name: "tiny", Checkpoint: ckpt}}
	inputs, data, err := spec.ReadInputs(exp)
	if err != nil || len(inputs) != 1 || inputs[0].Kind != spec.InputCopied {
		t.Fatalf("inputs %+v: %v", inputs, err)
	}
	for key, b := range data {
		if err := s.WriteAll(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(ckpt); err != nil {
		t.Fatal(err)
	}
	rt, err := NewRuntime(ctx, s, exp, RuntimeOptions{Log: discard, Inputs: inputs})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if r, err := rt.Model.Chat(ctx, chatReq("hello")); err != nil || r.Model != "tiny" {
		t.Fatalf("answer %+v: %v", r, err)
	}

	bad := slices.Clone(inputs)
	bad[0].Digest = "sha256:" + strings.Repeat("0", 64)
	if _, err := NewRuntime(ctx, s, exp, RuntimeOptions{Log: discard, Inputs: bad}); err == nil || !strings.Contains(err.Error(), "does not hash to") {
		t.Fatalf("a copy that does not match its digest: %v", err)
	}
}

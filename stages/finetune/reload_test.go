package finetune

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/whalerun/whale/internal/retry"
	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/storage"
)

// fastReloadRetry keeps the reload's three tries but drops the waits.
func fastReloadRetry(t *testing.T) {
	old := reloadRetry
	reloadRetry = retry.Policy{Attempts: old.Attempts}
	t.Cleanup(func() { reloadRetry = old })
}

// fakeVLLM starts a FAKE vLLM server (models/modeltest) serving "qwen".
func fakeVLLM(t *testing.T, opts modeltest.VLLMOptions) (*modeltest.Server, *modeltest.VLLM) {
	srv := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: "ok"}))
	if opts.Served == "" {
		opts.Served = "qwen"
	}
	return srv, srv.VLLM(opts)
}

func notCommitted(t *testing.T, s *storage.Store, pos string) {
	t.Helper()
	if _, err := storage.LatestCommitted(context.Background(), s, "exp", pos, Name); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("%s committed after a failed hand-off: %v", pos, err)
	}
}

// A LoRA step loads its adapter under a name new to every execution, the
// id the summary records; a retry of the position after a failed
// hand-off loads under another name rather than meet the adapter the
// failed try left on the first server, and unloads that one.
func TestReloadFakeVLLMLoRAFreshNamePerTry(t *testing.T) {
	fastReloadRetry(t)
	srv1, v1 := fakeVLLM(t, modeltest.VLLMOptions{RuntimeLoRA: true})
	srv2, v2 := fakeVLLM(t, modeltest.VLLMOptions{RuntimeLoRA: false}) // loading off: 404
	s := openStore(t, "mem://")
	commitSFT(t, s, "r001-w01", examples(2))
	cfg := baseConfig(countingTrainer)
	cfg.Reload = ReloadVLLMLoRA
	st := &Stage{WorkDir: t.TempDir(), ReloadEndpoints: []string{srv1.URL, srv2.URL}, APIKey: "sk-test"}

	_, err := stages.Execute(context.Background(), s, ftSpec("r001-w01", cfg, ""), st)
	if err == nil || !strings.Contains(err.Error(), "HTTP 404") || !strings.Contains(err.Error(), "VLLM_ALLOW_RUNTIME_LORA_UPDATING") || strings.Contains(err.Error(), "sk-test") {
		t.Fatalf("err = %v", err)
	}
	notCommitted(t, s, "r001-w01")
	first := v1.Adapters()
	if len(first) != 1 {
		t.Fatalf("first server holds %v after the failed try", first)
	}

	// The operator turns runtime LoRA loading on and reruns: the attempt
	// is resumed under its number, the adapter gets a new name.
	v2 = srv2.VLLM(modeltest.VLLMOptions{Served: "qwen", RuntimeLoRA: true})
	res, err := stages.Execute(context.Background(), s, ftSpec("r001-w01", cfg, ""), st)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := res.Manifest.Summary[SumModelID].(string)
	if !strings.HasPrefix(id, "qwen@exp/r001-w01-a1-") || res.Manifest.Summary[SumReloaded] != 2.0 || readIndex(t, s, res.Manifest).ModelID != id {
		t.Fatalf("summary %v", res.Manifest.Summary)
	}
	if _, stale := first[id]; stale {
		t.Fatalf("the retry reused the failed try's adapter name %q", id)
	}
	for i, v := range []*modeltest.VLLM{v1, v2} {
		got := v.Adapters()
		if len(got) != 1 || got[id] == "" {
			t.Errorf("server %d holds %v, want only %s", i+1, got, id)
		}
		if _, err := os.Stat(filepath.Join(got[id], "model.bin")); err != nil {
			t.Errorf("server %d: the adapter directory is gone: %v", i+1, err)
		}
	}
	var stale string
	for name := range first {
		stale = name
	}
	if want := "POST /v1/unload_lora_adapter " + stale; !slices.Contains(v1.Admin(), want) {
		t.Errorf("server 1 calls %v, want %q", v1.Admin(), want)
	}
	// The servers accept the id the rollouts will request.
	for _, srv := range []*modeltest.Server{srv1, srv2} {
		resp, err := http.Post(srv.URL+"/chat/completions", "application/json",
			strings.NewReader(`{"model":"`+id+`","messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: chat for %s: HTTP %d", srv.URL, id, resp.StatusCode)
		}
	}
}

// A name the server already holds: an id whale made for this execution
// is someone else's adapter, not replaced (the stage fails and says why);
// an id the trainer chose (whale_model_id) may be an earlier try's, which
// is unloaded and loaded again from this try's directory.
func TestReloadFakeVLLMLoRAAlreadyLoaded(t *testing.T) {
	fastReloadRetry(t)
	old := randRead
	randRead = func(b []byte) (int, error) { clear(b); return len(b), nil }
	t.Cleanup(func() { randRead = old })
	cases := []struct {
		name, trainer, held string
		wantErr             []string
		calls               []string
	}{
		{"whale's name", countingTrainer, "qwen@exp/r001-w01-a1-00000000",
			[]string{"HTTP 400", "has already been loaded", "another client loaded"},
			[]string{"POST /v1/load_lora_adapter qwen@exp/r001-w01-a1-00000000"}},
		{"trainer's name", countingTrainer + `echo mine > "$WHALE_OUTPUT_DIR/whale_model_id"` + "\n", "mine", nil,
			[]string{"POST /v1/load_lora_adapter mine", "POST /v1/unload_lora_adapter mine", "POST /v1/load_lora_adapter mine"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv, v := fakeVLLM(t, modeltest.VLLMOptions{RuntimeLoRA: true})
			v.LoadAdapter(c.held, "/elsewhere")
			s := openStore(t, "mem://")
			commitSFT(t, s, "r001-w01", examples(1))
			cfg := baseConfig(c.trainer)
			cfg.Reload = ReloadVLLMLoRA
			res, err := stages.Execute(context.Background(), s, ftSpec("r001-w01", cfg, ""), &Stage{WorkDir: t.TempDir(), ReloadEndpoints: []string{srv.URL}})
			for _, w := range c.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("err = %v, want %q", err, w)
				}
			}
			if got := v.Admin(); len(got) < len(c.calls) || !slices.Equal(got[:len(c.calls)], c.calls) {
				t.Errorf("calls %v, want %v first", v.Admin(), c.calls)
			}
			if c.wantErr != nil {
				if got := v.Adapters(); got[c.held] != "/elsewhere" {
					t.Fatalf("the other adapter was replaced: %v", got)
				}
				notCommitted(t, s, "r001-w01")
				return
			}
			if err != nil || res.Manifest.Summary[SumModelID] != c.held || v.Adapters()[c.held] == "/elsewhere" {
				t.Fatalf("err %v, summary %v, adapters %v", err, res.Manifest.Summary, v.Adapters())
			}
		})
	}
}

// fullTrainer writes a Hugging Face directory as the reference trainer
// does: config, tokenizer and safetensors.
const fullTrainer = `set -e
printf '{"model_type":"qwen3"}' > "$WHALE_OUTPUT_DIR/config.json"
printf '{}' > "$WHALE_OUTPUT_DIR/tokenizer.json"
printf 'weights of %s' "$WHALE_POSITION" > "$WHALE_OUTPUT_DIR/model.safetensors"
`

func weightsConfig() Config {
	cfg := baseConfig(fullTrainer)
	cfg.LoRA, cfg.LoRARank, cfg.LoRAAlpha = false, 0, 0
	cfg.Reload = ReloadVLLMWeights
	return cfg
}

// vllm-weights loads the new directory into every running server in
// place, drops the prefix cache and checks the served name; the position's
// id is recorded while the servers keep their name.
func TestReloadFakeVLLMWeights(t *testing.T) {
	fastReloadRetry(t)
	srv1, v1 := fakeVLLM(t, modeltest.VLLMOptions{DevMode: true, Weights: "/models/qwen"})
	srv2, v2 := fakeVLLM(t, modeltest.VLLMOptions{DevMode: true, Weights: "/models/qwen"})
	v2.FailReloads(http.StatusInternalServerError) // raised mid-load once
	s := openStore(t, "mem://")
	commitSFT(t, s, "r001-w01", examples(2))
	work := t.TempDir()
	st := &Stage{WorkDir: work, ReloadEndpoints: []string{srv1.URL, srv2.URL + "/"}}
	res, err := stages.Execute(context.Background(), s, ftSpec("r001-w01", weightsConfig(), ""), st)
	if err != nil {
		t.Fatal(err)
	}
	sum := res.Manifest.Summary
	if sum[SumModelID] != "qwen@exp/r001-w01" || sum[SumReloaded] != 2.0 || sum[SumTrained] != true {
		t.Fatalf("summary %v", sum)
	}
	idx := readIndex(t, s, res.Manifest)
	if idx.LoRA || fileOf(t, s, idx, "model.safetensors") != "weights of r001-w01" {
		t.Fatalf("index %+v", idx)
	}
	for i, c := range []struct {
		v     *modeltest.VLLM
		calls []string
	}{
		{v1, []string{"POST /collective_rpc reload_weights", "POST /reset_prefix_cache"}},
		{v2, []string{"POST /collective_rpc reload_weights", "POST /collective_rpc reload_weights", "POST /reset_prefix_cache"}},
	} {
		w := c.v.Weights()
		if !strings.HasPrefix(w, work) || filepath.Base(w) != "output" {
			t.Errorf("server %d serves %q, want the stage's output directory under %s", i+1, w, work)
		}
		if !slices.Equal(c.v.Admin(), c.calls) || c.v.PrefixCacheResets() != 1 {
			t.Errorf("server %d calls %v, want %v", i+1, c.v.Admin(), c.calls)
		}
	}
	// The servers read the directory during the call; it is not kept.
	if _, err := os.Stat(v1.Weights()); !os.IsNotExist(err) {
		t.Errorf("output directory left behind: %v", err)
	}
}

func TestReloadFakeVLLMWeightsFailures(t *testing.T) {
	fastReloadRetry(t)
	cases := []struct {
		name  string
		opts  modeltest.VLLMOptions
		fail  []int
		want  []string
		calls []string
	}{
		{"dev mode off", modeltest.VLLMOptions{}, nil,
			[]string{"HTTP 404", `{"detail":"Not Found"}`, "VLLM_SERVER_DEV_MODE=1", "jobs/vllm/reload.sh"}, nil},
		{"500 on every try", modeltest.VLLMOptions{DevMode: true}, []int{500, 500, 500},
			[]string{"HTTP 500", "after 3 attempts", "mix of old and new weights"},
			[]string{"POST /collective_rpc reload_weights", "POST /collective_rpc reload_weights", "POST /collective_rpc reload_weights"}},
		{"other served name", modeltest.VLLMOptions{DevMode: true, Served: "Qwen/Qwen3-4B"}, nil,
			[]string{`serves ["Qwen/Qwen3-4B"], not "qwen"`, "--served-model-name qwen"},
			[]string{"POST /collective_rpc reload_weights", "POST /reset_prefix_cache"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv, v := fakeVLLM(t, c.opts)
			v.FailReloads(c.fail...)
			s := openStore(t, "mem://")
			commitSFT(t, s, "r001-w01", examples(1))
			st := &Stage{WorkDir: t.TempDir(), ReloadEndpoints: []string{srv.URL}}
			_, err := stages.Execute(context.Background(), s, ftSpec("r001-w01", weightsConfig(), ""), st)
			for _, w := range c.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Fatalf("err = %v, want it to say %q", err, w)
				}
			}
			notCommitted(t, s, "r001-w01")
			if !slices.Equal(v.Admin(), c.calls) {
				t.Errorf("calls %v, want %v", v.Admin(), c.calls)
			}
		})
	}
}

// A server left with half-loaded weights by a failed stage is mended by
// the rerun, which loads the whole directory again.
func TestReloadFakeVLLMWeightsRerunMends(t *testing.T) {
	fastReloadRetry(t)
	srv, v := fakeVLLM(t, modeltest.VLLMOptions{DevMode: true})
	v.FailReloads(500, 500, 500)
	s := openStore(t, "mem://")
	commitSFT(t, s, "r001-w01", examples(1))
	st := &Stage{WorkDir: t.TempDir(), ReloadEndpoints: []string{srv.URL}}
	if _, err := stages.Execute(context.Background(), s, ftSpec("r001-w01", weightsConfig(), ""), st); err == nil {
		t.Fatal("no error")
	}
	if w := v.Weights(); !strings.HasPrefix(w, "partial:") {
		t.Fatalf("weights %q after the failed loads", w)
	}
	res, err := stages.Execute(context.Background(), s, ftSpec("r001-w01", weightsConfig(), ""), st)
	if err != nil || !res.Committed || res.Attempt != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	if w := v.Weights(); strings.HasPrefix(w, "partial:") || filepath.Base(w) != "output" {
		t.Fatalf("weights %q after the rerun", w)
	}
}

package pipeline

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/storage"
)

// hfTrainer writes a Hugging Face directory (config, tokenizer,
// safetensors), as the reference trainer does for a full fine-tune.
const hfTrainer = `printf '{"model_type":"qwen3"}' > "$WHALE_OUTPUT_DIR/config.json"; printf '{}' > "$WHALE_OUTPUT_DIR/tokenizer.json"; printf 'w %s' "$WHALE_POSITION" > "$WHALE_OUTPUT_DIR/model.safetensors"`

// rolloutModelIDs is the model_ids summary of the rollout at pos.
func rolloutModelIDs(t *testing.T, w *world, run, pos string) []any {
	t.Helper()
	m, err := storage.LatestCommitted(context.Background(), w.store, run, pos, StageRollout)
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := m.Summary["model_ids"].([]any)
	return ids
}

func finetuneModelID(t *testing.T, w *world, run, pos string) string {
	t.Helper()
	m, err := storage.LatestCommitted(context.Background(), w.store, run, pos, StageFinetune)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := m.Summary["model_id"].(string)
	return id
}

// A full fine-tune handed to a running vLLM with reload: vllm-weights:
// the FAKE vLLM (dev mode on) loads each step's checkpoint in place and
// keeps serving model.name; the rollouts after a step ask for model.name,
// which is all the server accepts, and record the step's model id.
func TestVLLMWeightsHandOffFakeVLLM(t *testing.T) {
	w := newWorld(t, "file://"+t.TempDir())
	v := w.server.VLLM(modeltest.VLLMOptions{Served: "fake-model", Weights: "/models/base", DevMode: true})
	src := string(experimentSource(t, w, "full", "schedule: weights-only\nbudget: {weight_steps: 2}\nswitch: {fixed: {epochs: 1}}\n"))
	src = strings.Replace(src, fmt.Sprintf("command: %q, reload: none", trainer), fmt.Sprintf("command: %q, reload: vllm-weights", hfTrainer), 1)
	exp, err := spec.Parse("full.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	r := w.runner(t, exp)
	r.Runtime.WorkDir = t.TempDir()
	runToEnd(t, r)

	id := finetuneModelID(t, w, exp.Name, "r001-w01")
	if id != "fake-model@full/r001-w01" {
		t.Fatalf("finetune model id %q", id)
	}
	reloads := 0
	for _, c := range v.Admin() {
		if c == "POST /collective_rpc reload_weights" {
			reloads++
		}
	}
	if reloads != 2 || v.PrefixCacheResets() != 2 || !strings.HasPrefix(v.Weights(), r.Runtime.WorkDir) {
		t.Errorf("admin calls %v, weights %q", v.Admin(), v.Weights())
	}
	if ids := rolloutModelIDs(t, w, exp.Name, "r001-w02"); len(ids) != 1 || ids[0] != id {
		t.Errorf("the rollout after the finetune recorded %v, want [%s]", ids, id)
	}
	if ids := rolloutModelIDs(t, w, exp.Name, "r001-w01"); len(ids) != 1 || ids[0] != exp.Model.Name {
		t.Errorf("the first rollout recorded %v, want the base model", ids)
	}
	for _, req := range w.server.Requests() {
		if req.Model != "fake-model" {
			t.Fatalf("a chat request asked for %q; the server serves fake-model", req.Model)
		}
	}
}

// With reload: command the command must leave the servers serving the
// checkpoint under $WHALE_MODEL_ID, and the next rollout asks for that id.
// The reload command here "restarts" the FAKE vLLM under the new name
// through a control hook of the test (jobs/vllm tests the real script).
func TestReloadCommandServesModelIDFakeVLLM(t *testing.T) {
	w := newWorld(t, "file://"+t.TempDir())
	w.server.VLLM(modeltest.VLLMOptions{Served: "fake-model"})
	var mu sync.Mutex
	var restarts []string
	ctl := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		id := req.URL.Query().Get("model")
		mu.Lock()
		restarts = append(restarts, id+" "+req.URL.Query().Get("dir"))
		mu.Unlock()
		w.server.VLLM(modeltest.VLLMOptions{Served: id, Weights: req.URL.Query().Get("dir")})
	}))
	defer ctl.Close()
	reload := fmt.Sprintf(`curl -fsS -G %s --data-urlencode "model=$WHALE_MODEL_ID" --data-urlencode "dir=$WHALE_CHECKPOINT_DIR"`, ctl.URL)
	src := string(experimentSource(t, w, "restart", "schedule: weights-only\nbudget: {weight_steps: 2}\nswitch: {fixed: {epochs: 1}}\n"))
	src = strings.Replace(src, "reload: none", fmt.Sprintf("reload: command, reload_command: %q", reload), 1)
	exp, err := spec.Parse("restart.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	runToEnd(t, w.runner(t, exp))

	id := finetuneModelID(t, w, exp.Name, "r001-w01")
	mu.Lock()
	defer mu.Unlock()
	if len(restarts) != 2 || !strings.HasPrefix(restarts[0], id+" /") {
		t.Fatalf("restarts %v, want 2 starting with %s", restarts, id)
	}
	if ids := rolloutModelIDs(t, w, exp.Name, "r001-w02"); len(ids) != 1 || ids[0] != id {
		t.Errorf("the rollout after the finetune recorded %v, want [%s]", ids, id)
	}
	var asked []string
	for _, req := range w.server.Requests() {
		if !slices.Contains(asked, req.Model) {
			asked = append(asked, req.Model)
		}
	}
	if !slices.Contains(asked, id) {
		t.Errorf("chat requests asked for %v, want %s among them", asked, id)
	}
}

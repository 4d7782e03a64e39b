package modeltest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/whalerun/whale/models/openai"
)

// VLLMOptions say how the FAKE vLLM was "started": which flags and
// environment a real `vllm serve` would have had.
type VLLMOptions struct {
	// Served is --served-model-name: the name chat requests must ask for
	// (or a loaded LoRA adapter's name). Empty: "modeltest".
	Served string
	// Weights is the model directory the server loaded at start.
	Weights string
	// DevMode is VLLM_SERVER_DEV_MODE=1. Without it vLLM does not mount
	// /collective_rpc, /reset_prefix_cache, /sleep, /wake_up and
	// /is_sleeping, and FastAPI answers 404 {"detail":"Not Found"}.
	DevMode bool
	// RuntimeLoRA is VLLM_ALLOW_RUNTIME_LORA_UPDATING=True, which mounts
	// /v1/load_lora_adapter and /v1/unload_lora_adapter (404 without).
	RuntimeLoRA bool
}

// VLLM is the control plane of a FAKE vLLM server (see Server.VLLM): the
// served name, the weights in use, the LoRA adapters loaded by name and
// the admin calls received, with faults to inject.
type VLLM struct {
	mu       sync.Mutex
	opts     VLLMOptions
	weights  string
	adapters map[string]string // lora_name → lora_path
	resets   int
	admin    []string
	// failReloads answer the next reload_weights calls with their status,
	// in order, after the fake has started loading (mid-load).
	failReloads []int
}

// VLLM makes s answer like a vLLM OpenAI-compatible server started with
// opts: GET /v1/models lists the served name and the loaded adapters (with
// their "parent"), a chat request for any other model is vLLM's 404
// NotFoundError, and the control endpoints below answer as vLLM does.
//
//   - POST /collective_rpc (dev mode) {"method","args","kwargs"} runs
//     method on the workers: only "reload_weights" is known to the fake
//     (others answer 500 as a worker's AttributeError does). With
//     kwargs.weights_path it loads that directory in place, else the one
//     in use again; a directory without config.json or *.safetensors is a
//     500, as vLLM's loader raising is. Success is {"results":[null]}.
//   - POST /reset_prefix_cache (dev mode) empties the prefix cache: 200,
//     no body.
//   - POST /v1/load_lora_adapter {"lora_name","lora_path"} (runtime
//     LoRA): 400 "The lora adapter '…' has already been loaded." for a name
//     it holds, 400 for a path that is not a directory, else 200 with
//     vLLM's success text. POST /v1/unload_lora_adapter: 404 for a name
//     it does not hold.
//
// A 500 injected with FailReloads leaves the weights half-loaded (Weights
// reports "partial:<dir>") as a worker that raised mid-load does.
func (s *Server) VLLM(opts VLLMOptions) *VLLM {
	if opts.Served == "" {
		opts.Served = "modeltest"
	}
	v := &VLLM{opts: opts, weights: opts.Weights, adapters: map[string]string{}}
	s.mu.Lock()
	s.vllm = v
	s.mu.Unlock()
	return v
}

// FailReloads makes the next len(statuses) reload_weights calls fail
// with these statuses, in order (500: the engine raised mid-load).
func (v *VLLM) FailReloads(statuses ...int) {
	v.mu.Lock()
	v.failReloads = append(v.failReloads, statuses...)
	v.mu.Unlock()
}

// Weights is the model directory the server now serves.
func (v *VLLM) Weights() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.weights
}

// Adapters is a copy of the loaded LoRA adapters, name → path.
func (v *VLLM) Adapters() map[string]string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := make(map[string]string, len(v.adapters))
	for k, p := range v.adapters {
		out[k] = p
	}
	return out
}

// LoadAdapter puts an adapter in the server's table as an earlier load
// would have (a stale adapter of an earlier try).
func (v *VLLM) LoadAdapter(name, path string) {
	v.mu.Lock()
	v.adapters[name] = path
	v.mu.Unlock()
}

// PrefixCacheResets counts the successful /reset_prefix_cache calls.
func (v *VLLM) PrefixCacheResets() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.resets
}

// Admin lists the control calls received in order, as "METHOD PATH"
// with the RPC method or adapter name after it ("POST /collective_rpc
// reload_weights", "POST /v1/load_lora_adapter NAME").
func (v *VLLM) Admin() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.admin)
}

// serves reports whether a chat request may ask for model.
func (v *VLLM) serves(model string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	_, ok := v.adapters[model]
	return ok || model == v.opts.Served
}

// models is the body of GET /v1/models.
func (v *VLLM) models() map[string]any {
	v.mu.Lock()
	defer v.mu.Unlock()
	// root is the directory the server started on, reloads or not, as
	// vLLM reports it.
	data := []map[string]any{{"id": v.opts.Served, "object": "model", "owned_by": "vllm", "root": v.opts.Weights, "parent": nil}}
	names := make([]string, 0, len(v.adapters))
	for n := range v.adapters {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		data = append(data, map[string]any{"id": n, "object": "model", "owned_by": "vllm", "root": v.adapters[n], "parent": v.opts.Served})
	}
	return map[string]any{"object": "list", "data": data}
}

// handle answers the control endpoints; false leaves r to the chat
// server.
func (v *VLLM) handle(w http.ResponseWriter, r *http.Request) bool {
	dev := map[string]bool{"/collective_rpc": true, "/reset_prefix_cache": true, "/sleep": true, "/wake_up": true, "/is_sleeping": true}
	lora := r.URL.Path == "/v1/load_lora_adapter" || r.URL.Path == "/v1/unload_lora_adapter"
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/v1/models":
		writeJSON(w, http.StatusOK, v.models())
	case dev[r.URL.Path] && !v.opts.DevMode, lora && !v.opts.RuntimeLoRA:
		writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
	case r.Method == http.MethodPost && r.URL.Path == "/collective_rpc":
		v.rpc(w, r)
	case r.Method == http.MethodPost && r.URL.Path == "/reset_prefix_cache":
		v.mu.Lock()
		v.admin = append(v.admin, "POST /reset_prefix_cache")
		v.resets++
		v.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	case r.Method == http.MethodPost && lora:
		v.loraCall(w, r)
	case dev[r.URL.Path]:
		// Mounted, but the fake does not implement it: a test that needs
		// it must add it rather than get a silent success.
		writeError(w, http.StatusNotImplemented, "modeltest: the fake vLLM does not implement "+r.URL.Path)
	default:
		return false
	}
	return true
}

func (v *VLLM) rpc(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Method string            `json:"method"`
		Args   []string          `json:"args"`
		Kwargs map[string]string `json:"kwargs"`
	}
	raw, _ := io.ReadAll(r.Body)
	if err := json.Unmarshal(raw, &body); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "JSON decode error: " + err.Error()})
		return
	}
	if body.Method == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"detail": "Missing 'method' in request body"})
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.admin = append(v.admin, "POST /collective_rpc "+body.Method)
	if body.Method != "reload_weights" {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("'Worker' object has no attribute '%s'", body.Method))
		return
	}
	dir := v.weights
	if p, ok := body.Kwargs["weights_path"]; ok {
		dir = p
	}
	if len(v.failReloads) > 0 {
		status := v.failReloads[0]
		v.failReloads = v.failReloads[1:]
		if status == http.StatusInternalServerError {
			v.weights = "partial:" + dir
		}
		writeError(w, status, "modeltest: injected failure while loading "+dir)
		return
	}
	if err := checkpointDir(dir); err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	v.weights = dir
	writeJSON(w, http.StatusOK, map[string]any{"results": []any{nil}})
}

// checkpointDir is what vLLM's default loader needs of a Hugging Face
// directory: its config and at least one safetensors file.
func checkpointDir(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		return fmt.Errorf("Invalid repository ID or local directory specified: '%s'", dir)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.safetensors")); len(m) == 0 {
		return fmt.Errorf("Cannot find any model weights with `%s`", dir)
	}
	return nil
}

func (v *VLLM) loraCall(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name string `json:"lora_name"`
		Path string `json:"lora_path"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Name == "" {
		writeError(w, http.StatusBadRequest, "lora_name: Field required")
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.admin = append(v.admin, "POST "+r.URL.Path+" "+body.Name)
	switch r.URL.Path {
	case "/v1/load_lora_adapter":
		if _, ok := v.adapters[body.Name]; ok {
			writeVLLMError(w, http.StatusBadRequest, "BadRequestError", fmt.Sprintf("The lora adapter '%s' has already been loaded.", body.Name))
			return
		}
		if fi, err := os.Stat(body.Path); err != nil || !fi.IsDir() {
			writeVLLMError(w, http.StatusBadRequest, "BadRequestError", fmt.Sprintf("No adapter found for %s", body.Path))
			return
		}
		v.adapters[body.Name] = body.Path
		fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", body.Name)
	default:
		if _, ok := v.adapters[body.Name]; !ok {
			writeVLLMError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The lora adapter '%s' cannot be found.", body.Name))
			return
		}
		delete(v.adapters, body.Name)
		fmt.Fprintf(w, "Success: LoRA adapter '%s' removed successfully.", body.Name)
	}
}

// writeVLLMError answers with an error type of vLLM's own (the OpenAI
// shape; writeError puts the status text as the type).
func writeVLLMError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, openai.ErrorResponse{Error: openai.ErrorBody{Message: msg, Type: typ, Code: status}})
}

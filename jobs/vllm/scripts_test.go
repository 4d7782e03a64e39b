// Package vllm tests the shell scripts of jobs/vllm against a FAKE vLLM:
// this test binary itself, run as `vllm serve` by serve.sh (TestMain).
package vllm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/stages/finetune"
	"github.com/whalerun/whale/storage"
)

func TestMain(m *testing.M) {
	if os.Getenv("WHALE_FAKE_VLLM") == "1" {
		os.Exit(fakeVLLM(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeVLLM is a FAKE `vllm serve DIR --served-model-name NAME --port P
// [--api-key K]`: it fails at start, as vLLM does, when DIR is not a
// Hugging Face checkpoint (config.json and *.safetensors); takes a moment
// to load; then serves /health and /v1/models (id NAME, root DIR, behind
// the key as vLLM's --api-key puts /v1 behind it) until SIGTERM. Each
// start is appended to $WHALE_FAKE_VLLM_LOG.
func fakeVLLM(args []string) int {
	if len(args) < 2 || args[0] != "serve" {
		fmt.Fprintln(os.Stderr, "fake vllm: usage: vllm serve MODEL [options]")
		return 2
	}
	dir, name, port, key := args[1], args[1], "8000", ""
	for i := 2; i+1 < len(args); i++ {
		switch args[i] {
		case "--served-model-name":
			name = args[i+1]
		case "--port":
			port = args[i+1]
		case "--api-key":
			key = args[i+1]
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		fmt.Fprintf(os.Stderr, "ValueError: Invalid repository ID or local directory specified: '%s'\n", dir)
		return 1
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.safetensors")); len(m) == 0 {
		fmt.Fprintf(os.Stderr, "RuntimeError: Cannot find any model weights with `%s`\n", dir)
		return 1
	}
	if f, err := os.OpenFile(os.Getenv("WHALE_FAKE_VLLM_LOG"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
		fmt.Fprintf(f, "start %s %s\n", name, dir)
		f.Close()
	}
	time.Sleep(300 * time.Millisecond) // loading the weights
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		if key != "" && r.Header.Get("Authorization") != "Bearer "+key {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":"Unauthorized"}`))
			return
		}
		type card struct {
			ID      string  `json:"id"`
			Object  string  `json:"object"`
			Created int64   `json:"created"`
			OwnedBy string  `json:"owned_by"`
			Root    string  `json:"root"`
			Parent  *string `json:"parent"`
		}
		json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": []card{{name, "model", time.Now().Unix(), "vllm", dir, nil}}})
	})
	srv := &http.Server{Addr: "127.0.0.1:" + port, Handler: mux}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintln(os.Stderr, "fake vllm:", err)
		return 1
	}
	return 0
}

// hfDir is a Hugging Face checkpoint directory whose weights say tag
// (no weights when tag is "").
func hfDir(t *testing.T, tag string) string {
	t.Helper()
	d := t.TempDir()
	os.WriteFile(filepath.Join(d, "config.json"), []byte(`{"model_type":"qwen3"}`), 0o644)
	os.WriteFile(filepath.Join(d, "tokenizer.json"), []byte(`{}`), 0o644)
	if tag != "" {
		os.WriteFile(filepath.Join(d, "model.safetensors"), []byte(tag), 0o644)
	}
	return d
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// served is the (id, root) the server at base reports, or an error.
func served(base, key string) (id, root string, err error) {
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct{ ID, Root string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list.Data) == 0 {
		return "", "", fmt.Errorf("HTTP %d, %v", resp.StatusCode, err)
	}
	return list.Data[0].ID, list.Data[0].Root, nil
}

// startServe runs serve.sh with the fake vLLM on a free port and waits
// until it serves the base model; the script and its server stop when
// the test ends.
func startServe(t *testing.T, state, base, key string) (url, starts string) {
	t.Helper()
	port := freePort(t)
	starts = filepath.Join(t.TempDir(), "starts")
	cmd := exec.Command("/bin/sh", "serve.sh", state, base, "fake-model", "--port", port, "--api-key", key)
	cmd.Env = append(os.Environ(), "VLLM_BIN="+os.Args[0], "WHALE_FAKE_VLLM=1", "WHALE_FAKE_VLLM_LOG="+starts, "WHALE_VLLM_POLL=0.2")
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("serve.sh did not stop on SIGTERM; its log:\n%s", log.String())
		}
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})
	url = "http://127.0.0.1:" + port
	for deadline := time.Now().Add(30 * time.Second); ; {
		if id, root, err := served(url, key); err == nil {
			if id != "fake-model" || root != base {
				t.Fatalf("serve.sh started %s from %s, want fake-model from %s", id, root, base)
			}
			return url, starts
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve.sh's server did not come up; its log:\n%s", log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// reload runs reload.sh as whale's finetune stage runs a reload command:
// /bin/sh -c with the WHALE_* environment.
func reload(t *testing.T, env map[string]string) (string, error) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "./reload.sh")
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// reload.sh hands each checkpoint to the servers serve.sh runs, under
// the model id whale's next rollout requests, and returns only when they
// serve it: a new position, a retrained checkpoint of the same position,
// a checkpoint the server cannot load (the script times out and says so)
// and the recovery from it.
func TestReloadScriptFakeVLLM(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("reload.sh needs curl, which is not on PATH")
	}
	state := t.TempDir()
	url, starts := startServe(t, state, hfDir(t, "base"), "sk-test")
	store := filepath.Join(state, "checkpoints", "exp")
	env := func(pos, attempt, ckpt string) map[string]string {
		return map[string]string{
			"WHALE_CHECKPOINT_DIR": ckpt, "WHALE_MODEL_ID": "fake-model@exp/" + pos,
			"WHALE_RUN": "exp", "WHALE_POSITION": pos, "WHALE_ATTEMPT": attempt,
			"WHALE_VLLM_STATE": state, "WHALE_VLLM_ENDPOINTS": url + "/v1/", "WHALE_VLLM_POLL": "0.2",
			"WHALE_VLLM_TIMEOUT": "30", "VLLM_API_KEY": "sk-test",
		}
	}
	check := func(pos, weights string) string {
		t.Helper()
		id, root, err := served(url, "sk-test")
		if err != nil || id != "fake-model@exp/"+pos || !strings.HasPrefix(root, filepath.Join(store, pos+"-a")) {
			t.Fatalf("serving %q from %q (%v), want fake-model@exp/%s from %s", id, root, err, pos, store)
		}
		if b, _ := os.ReadFile(filepath.Join(root, "model.safetensors")); string(b) != weights {
			t.Fatalf("%s holds weights %q, want %q", root, b, weights)
		}
		if entries, _ := os.ReadDir(store); len(entries) != 1 {
			t.Fatalf("%s holds %d checkpoints, want only the one served", store, len(entries))
		}
		return root
	}

	out, err := reload(t, env("r001-w01", "1", hfDir(t, "step 1")))
	if err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	first := check("r001-w01", "step 1")

	// The same position retrained (a resumed attempt): same id, new
	// weights, so the server restarts on them.
	if out, err := reload(t, env("r001-w01", "1", hfDir(t, "step 1 again"))); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	if again := check("r001-w01", "step 1 again"); again == first {
		t.Fatalf("the retrained checkpoint was not handed over: still %s", again)
	}

	if out, err := reload(t, env("r001-w02", "1", hfDir(t, "step 2"))); err != nil {
		t.Fatalf("%v:\n%s", err, out)
	}
	check("r001-w02", "step 2")

	// A checkpoint vLLM cannot load: the server does not come back, and
	// the script gives up with the endpoint and what it answered.
	bad := env("r001-w03", "1", hfDir(t, ""))
	bad["WHALE_VLLM_TIMEOUT"] = "3"
	out, err = reload(t, bad)
	if err == nil || !strings.Contains(out, url+"/v1 does not serve") || !strings.Contains(out, "fake-model@exp/r001-w03") {
		t.Fatalf("err %v, output:\n%s", err, out)
	}
	if out, err := reload(t, env("r001-w03", "2", hfDir(t, "step 3"))); err != nil {
		t.Fatalf("recovery: %v:\n%s", err, out)
	}
	check("r001-w03", "step 3")

	b, _ := os.ReadFile(starts)
	if n := strings.Count(string(b), "start fake-model"); n != 5 {
		t.Errorf("the server started %d times, want 5 (base, 3 good reloads, 1 failed); log:\n%s", n, b)
	}
}

func TestReloadScriptRefusesBadEnvironment(t *testing.T) {
	state := t.TempDir()
	good := map[string]string{
		"WHALE_CHECKPOINT_DIR": hfDir(t, "w"), "WHALE_MODEL_ID": "m@exp/r001-w01", "WHALE_RUN": "exp",
		"WHALE_POSITION": "r001-w01", "WHALE_VLLM_STATE": state, "WHALE_VLLM_ENDPOINTS": "http://127.0.0.1:1/v1",
	}
	cases := []struct {
		name, key, value, want string
	}{
		{"no endpoints", "WHALE_VLLM_ENDPOINTS", "", "WHALE_VLLM_ENDPOINTS is not set: set it in finetune.env"},
		{"no state", "WHALE_VLLM_STATE", "", "WHALE_VLLM_STATE is not set"},
		{"state missing", "WHALE_VLLM_STATE", filepath.Join(state, "nope"), "is not a directory"},
		{"not run by whale", "WHALE_MODEL_ID", "", "WHALE_MODEL_ID is not set: whale's finetune stage sets it"},
		{"not a checkpoint", "WHALE_CHECKPOINT_DIR", t.TempDir(), "has no config.json"},
		{"timeout with a unit", "WHALE_VLLM_TIMEOUT", "30m", "WHALE_VLLM_TIMEOUT is 30m: seconds, a whole number"},
		{"poll with a unit", "WHALE_VLLM_POLL", "2s", "WHALE_VLLM_POLL is 2s: seconds"},
		{"id JSON escapes", "WHALE_MODEL_ID", `m"x@exp/r001-w01`, "only letters, digits and"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range good {
				env[k] = v
			}
			env[c.key] = c.value
			out, err := reload(t, env)
			if err == nil || !strings.Contains(out, c.want) {
				t.Fatalf("err %v, output %q, want %q", err, out, c.want)
			}
			if _, err := os.Stat(filepath.Join(state, "current")); !os.IsNotExist(err) {
				t.Fatalf("a refused reload wrote the state: %v", err)
			}
		})
	}
}

// The scripts are POSIX sh (dash parses them) and shellcheck-clean.
func TestScriptsLint(t *testing.T) {
	scripts := []string{"reload.sh", "serve.sh"}
	for _, s := range scripts {
		if fi, err := os.Stat(s); err != nil || fi.Mode()&0o111 == 0 {
			t.Errorf("%s is not an executable file: %v", s, err)
		}
		if out, err := exec.Command("/bin/sh", "-n", s).CombinedOutput(); err != nil {
			t.Errorf("sh -n %s: %v\n%s", s, err, out)
		}
	}
	if _, err := exec.LookPath("shellcheck"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("shellcheck is not installed; `make tools` installs it")
		}
		t.Skip("shellcheck is not installed (`make shellcheck` or apt-get install shellcheck); syntax checked with sh -n only")
	}
	if out, err := exec.Command("shellcheck", append([]string{"--shell=sh"}, scripts...)...).CombinedOutput(); err != nil {
		t.Errorf("shellcheck: %v\n%s", err, out)
	}
}

// sftTable stands in for the filter stage: it commits one SFT row.
type sftTable struct{}

func (sftTable) Name() string { return "filter" }

func (sftTable) Run(ctx context.Context, x *stages.Exec) error {
	w, err := x.Create(ctx, "sft.parquet")
	if err != nil {
		return err
	}
	pw, err := schemas.NewWriter[schemas.SFTExample](w, schemas.SFT, schemas.WriterOptions{})
	if err != nil {
		return err
	}
	row := schemas.SFTExample{ExampleID: "e0", EpisodeID: "p0", TaskID: "t0", TrainMask: []bool{false, true},
		Messages: []schemas.Message{{Role: "user", Content: "1+1?"}, {Role: "assistant", Content: "2"}}}
	if err := pw.Write(row); err != nil {
		return err
	}
	if err := pw.Close(); err != nil {
		return err
	}
	w.SetRows(pw.Rows())
	return w.Close()
}

// The finetune stage with reload: command and reload.sh as its
// reload_command, as an experiment file names it: the stage's
// environment is the script's contract, and the stage commits only once
// the server serves the checkpoint under the id the stage records.
func TestReloadScriptFromFinetuneStage(t *testing.T) {
	ctx := context.Background()
	state := t.TempDir()
	url, _ := startServe(t, state, hfDir(t, "base"), "sk-test")
	t.Setenv("VLLM_API_KEY", "sk-test") // whale's environment, not the spec
	s, err := storage.Open(ctx, "mem://", &storage.Options{TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := stages.Execute(ctx, s, stages.Spec{Run: "exp", Position: "r001-w01", Config: map[string]any{"n": 1}, Log: quiet}, sftTable{}); err != nil {
		t.Fatal(err)
	}
	cfg := finetune.Config{
		Backend: finetune.BackendCommand,
		Command: `printf '{}' > "$WHALE_OUTPUT_DIR/config.json"; printf 'trained %s' "$WHALE_POSITION" > "$WHALE_OUTPUT_DIR/model.safetensors"`,
		Env: map[string]string{"WHALE_VLLM_STATE": state, "WHALE_VLLM_ENDPOINTS": url + "/v1",
			"WHALE_VLLM_POLL": "0.2", "WHALE_VLLM_TIMEOUT": "30"},
		BaseCheckpoint: "/models/base", ModelName: "fake-model", LearningRate: 1e-6, Epochs: 1,
		Reload: finetune.ReloadCommand, ReloadCommand: "jobs/vllm/reload.sh",
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	spec := stages.Spec{Run: "exp", Position: "r001-w01", Config: cfg, Log: quiet,
		Inputs: []stages.InputRef{{Name: "sft", Position: "r001-w01", Stage: "filter"}}}
	res, err := stages.Execute(ctx, s, spec, &finetune.Stage{CommandDir: repo})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := res.Manifest.Summary[finetune.SumModelID].(string)
	got, root, err := served(url, "sk-test")
	if err != nil || id != "fake-model@exp/r001-w01" || got != id {
		t.Fatalf("the stage recorded %q; the server serves %q (%v)", id, got, err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "model.safetensors")); string(b) != "trained r001-w01" {
		t.Fatalf("the server runs %s holding %q", root, b)
	}
}

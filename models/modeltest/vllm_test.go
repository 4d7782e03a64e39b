package modeltest

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The FAKE vLLM answers its control endpoints as vLLM does, failures
// included, and refuses chat for names it does not serve.
func TestFakeVLLMEndpoints(t *testing.T) {
	ckpt := t.TempDir()
	os.WriteFile(filepath.Join(ckpt, "config.json"), []byte("{}"), 0o644)
	os.WriteFile(filepath.Join(ckpt, "model.safetensors"), []byte("w"), 0o644)
	bare := t.TempDir() // a config, no weights
	os.WriteFile(filepath.Join(bare, "config.json"), []byte("{}"), 0o644)

	type call struct {
		method, path, body string
		status             int
		contains           string
	}
	cases := []struct {
		name  string
		opts  VLLMOptions
		calls []call
		after func(t *testing.T, v *VLLM)
	}{
		{"dev endpoints off", VLLMOptions{Served: "m"}, []call{
			{"POST", "/collective_rpc", `{"method":"reload_weights"}`, 404, `{"detail":"Not Found"}`},
			{"POST", "/reset_prefix_cache", "", 404, "Not Found"},
			{"POST", "/v1/load_lora_adapter", `{"lora_name":"a","lora_path":"` + ckpt + `"}`, 404, "Not Found"},
		}, nil},
		{"reload weights", VLLMOptions{Served: "m", DevMode: true, Weights: "/base"}, []call{
			{"POST", "/collective_rpc", `{"method":"reload_weights","kwargs":{"weights_path":"` + bare + `"}}`, 500, "Cannot find any model weights"},
			{"POST", "/collective_rpc", `{"kwargs":{}}`, 400, "Missing 'method'"},
			{"POST", "/collective_rpc", `{"method":"reload_weights","kwargs":{"weights_path":"` + ckpt + `"}}`, 200, `{"results":[null]}`},
			{"POST", "/reset_prefix_cache", "", 200, ""},
			{"GET", "/v1/models", "", 200, `"id":"m"`},
			{"POST", "/v1/chat/completions", `{"model":"other","messages":[{"role":"user","content":"x"}]}`, 404, "The model `other` does not exist."},
			{"POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, 200, `"model":"m"`},
		}, func(t *testing.T, v *VLLM) {
			if v.Weights() != ckpt || v.PrefixCacheResets() != 1 {
				t.Errorf("weights %q, resets %d", v.Weights(), v.PrefixCacheResets())
			}
		}},
		{"mid-load failure", VLLMOptions{Served: "m", DevMode: true, Weights: "/base"}, []call{
			{"POST", "/collective_rpc", `{"method":"reload_weights","kwargs":{"weights_path":"` + ckpt + `"}}`, 500, "injected failure"},
		}, func(t *testing.T, v *VLLM) {
			if v.Weights() != "partial:"+ckpt {
				t.Errorf("weights %q", v.Weights())
			}
		}},
		{"lora", VLLMOptions{Served: "m", RuntimeLoRA: true}, []call{
			{"POST", "/v1/load_lora_adapter", `{"lora_name":"a","lora_path":"` + ckpt + `"}`, 200, "Success: LoRA adapter 'a' added successfully."},
			{"POST", "/v1/load_lora_adapter", `{"lora_name":"a","lora_path":"` + ckpt + `"}`, 400, "The lora adapter 'a' has already been loaded."},
			{"GET", "/v1/models", "", 200, `"id":"a","object":"model","owned_by":"vllm","parent":"m"`},
			{"POST", "/v1/chat/completions", `{"model":"a","messages":[{"role":"user","content":"x"}]}`, 200, `"model":"a"`},
			{"POST", "/v1/unload_lora_adapter", `{"lora_name":"a"}`, 200, "removed successfully"},
			{"POST", "/v1/unload_lora_adapter", `{"lora_name":"a"}`, 404, "cannot be found"},
		}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := NewServer(t, Always(Reply{Content: "hi"}))
			v := srv.VLLM(c.opts)
			if c.name == "mid-load failure" {
				v.FailReloads(500)
			}
			root := strings.TrimSuffix(srv.URL, "/v1")
			for i, k := range c.calls {
				req, _ := http.NewRequest(k.method, root+k.path, strings.NewReader(k.body))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != k.status || !strings.Contains(string(b), k.contains) {
					t.Fatalf("call %d %s %s: HTTP %d %s; want %d with %q", i, k.method, k.path, resp.StatusCode, b, k.status, k.contains)
				}
				if k.path == "/v1/models" {
					var list struct{ Data []map[string]any }
					if err := json.Unmarshal(b, &list); err != nil || list.Data[0]["parent"] != nil {
						t.Fatalf("models %s: %v", b, err)
					}
				}
			}
			if c.after != nil {
				c.after(t, v)
			}
		})
	}
}

package localserve

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// FuzzChatBody: any body gets a JSON answer, a 200 with one choice or an
// OpenAI-style error, never a panic or a hang. A 200's finish_reason is
// stop, length or tool_calls (then with calls), stop_reason is null or a
// stop string, tool_calls is a list, empty unless the request offered
// tools and tool_choice is not "none", and every call has a
// chatcmpl-tool- id, type function and a JSON object as arguments.
func FuzzChatBody(f *testing.F) {
	for _, seed := range []string{
		`{"model":"base","messages":[{"role":"user","content":"hi"}],"max_tokens":3}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}],"max_tokens":2,"stop":"x"}`,
		`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"1","function":{"name":"f","arguments":{"a":1}}}]},{"role":"tool","content":"r","tool_call_id":"1"}],"max_tokens":1,"stop":["a","b"]}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":0}`,
		`{"messages":[{"role":"user","content":"hi"}],"temperature":-1}`,
		`{"messages":[{"role":"user","content":"hi"}],"top_k":-1,"top_p":0.5,"seed":-3,"max_tokens":2}`,
		`{"messages":[{"role":"user","content":{"x":1}}]}`,
		`{"stream":true}`,
		`[]`,
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{"x":{"type":"integer"}}}}}]}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"tools":[{"function":{"name":"f"}}],"tool_choice":{"type":"function","function":{"name":"f"}}}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none","stop":["<tool_call>"]}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"tools":[],"tool_choice":"required"}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"tool_choice":{"function":{"name":1}}}`,
		`{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"tools":[{"type":"function","function":{"name":"f","parameters":"x"}}]}`,
		`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"a","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"1"}],"max_tokens":4,"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"auto"}`,
	} {
		f.Add(seed)
	}
	s, err := New(newModel(f, 1), Options{Name: "base", Window: 50_000})
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	f.Fuzz(func(t *testing.T, body string) {
		// Long generations only cost time; keep each input cheap.
		var probe map[string]any
		if json.Unmarshal([]byte(body), &probe) == nil {
			if mt, ok := probe["max_tokens"].(float64); !ok || mt > 8 {
				return
			}
		}
		w := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, PathChat, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		s.ServeHTTP(w, req)
		var resp struct {
			Choices []struct {
				FinishReason string  `json:"finish_reason"`
				StopReason   *string `json:"stop_reason"`
				Message      struct {
					Content   *string `json:"content"`
					ToolCalls []struct {
						ID       string `json:"id"`
						Type     string `json:"type"`
						Function struct{ Name, Arguments string }
					} `json:"tool_calls"`
				} `json:"message"`
			}
			Error *struct{ Message, Type string }
		}
		if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
			t.Fatalf("HTTP %d, body %q is not JSON: %v", w.Code, w.Body.String(), err)
		}
		switch {
		case w.Code == http.StatusOK:
			if len(resp.Choices) != 1 {
				t.Fatalf("200 with %s", w.Body.String())
			}
			c := resp.Choices[0]
			switch c.FinishReason {
			case "stop", "length":
			case "tool_calls":
				if len(c.Message.ToolCalls) == 0 {
					t.Fatalf("finish_reason tool_calls without calls: %s", w.Body.String())
				}
			default:
				t.Fatalf("finish_reason %q: %s", c.FinishReason, w.Body.String())
			}
			if c.StopReason != nil && (*c.StopReason == "" || c.FinishReason == "length") {
				t.Fatalf("stop_reason %q with finish_reason %s", *c.StopReason, c.FinishReason)
			}
			if c.Message.ToolCalls == nil {
				t.Fatalf("tool_calls is not a list: %s", w.Body.String())
			}
			if len(c.Message.ToolCalls) > 0 {
				if tools, _ := probe["tools"].([]any); len(tools) == 0 || probe["tool_choice"] == "none" {
					t.Fatalf("tool calls for a request without tools in play: %s", w.Body.String())
				}
			}
			if c.Message.Content == nil && len(c.Message.ToolCalls) == 0 {
				t.Fatalf("null content and no tool calls: %s", w.Body.String())
			}
			for _, tc := range c.Message.ToolCalls {
				var args map[string]any
				if !strings.HasPrefix(tc.ID, "chatcmpl-tool-") || tc.Type != "function" || json.Unmarshal([]byte(tc.Function.Arguments), &args) != nil || args == nil {
					t.Fatalf("tool call %+v", tc)
				}
			}
		case resp.Error == nil || resp.Error.Message == "" || resp.Error.Type == "":
			t.Fatalf("HTTP %d without an error object: %s", w.Code, w.Body.String())
		}
	})
}

// FuzzLoadAdapter: whatever lora_name and lora_path say, the load
// endpoint answers quickly with 200 or an OpenAI-style error, loads only
// the checkpoint inside the adapter directory (never the one beside it,
// reachable by "..", an absolute path or a symbolic link), and never
// repeats the bytes of a file it refused.
func FuzzLoadAdapter(f *testing.F) {
	fx := newFixtureDir(f)
	if err := syscall.Mkfifo(filepath.Join(fx.dir, "fifo"), 0o600); err != nil {
		f.Fatal(err)
	}
	for _, p := range []string{
		"good", "good/" + CheckpointFile, "./good/", "link-in.whalelm", "nested", "nested/deep/weights.bin",
		"../outside", "../outside/" + CheckpointFile, "good/../../outside/" + CheckpointFile, "link-out.whalelm",
		"link-rel-out.whalelm", "link-out-dir/" + CheckpointFile, "link-abs-in.whalelm", "link-secret", "zero", "fifo",
		"secret.txt", "magic.bin", "shadow", "", ".", "/", "//", "/dev/zero", "/etc/shadow", "\x00", "good\x00",
		fx.dir, fx.dir + "/good", fx.dir + "/../outside", fx.secret, filepath.Join(fx.outside, CheckpointFile),
	} {
		f.Add("fz", p)
	}
	s, err := New(newModel(f, 1), Options{Name: "base", AdapterDir: fx.dir, MaxAdapterBytes: 1 << 20, Log: quietLog()})
	if err != nil {
		f.Fatal(err)
	}
	defer s.Close()
	inner := fx.inner.Digest()
	f.Fuzz(func(t *testing.T, name, path string) {
		body, _ := json.Marshal(loraRequest{Name: name, Path: path})
		// The name the server sees: JSON has no invalid UTF-8.
		var sent loraRequest
		if err := json.Unmarshal(body, &sent); err != nil {
			t.Fatal(err)
		}
		name = sent.Name
		w := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, PathLoad, strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		s.ServeHTTP(w, req)
		if strings.Contains(w.Body.String(), "MARKER") {
			t.Fatalf("lora_path %q: the answer repeats a file: %s", path, w.Body.String())
		}
		if w.Code != http.StatusOK {
			var e struct {
				Error *struct{ Message, Type string }
			}
			if json.Unmarshal(w.Body.Bytes(), &e) != nil || e.Error == nil || e.Error.Message == "" {
				t.Fatalf("lora_path %q: HTTP %d without an error object: %s", path, w.Code, w.Body.String())
			}
			return
		}
		sv := s.lookup(name)
		if sv == nil || sv.name == "base" {
			t.Fatalf("lora_path %q: 200 but %q is not served", path, name)
		}
		if sv.digest != inner {
			t.Fatalf("lora_path %q loaded weights from outside the adapter directory (digest %s)", path, sv.digest)
		}
		w = httptest.NewRecorder()
		body, _ = json.Marshal(loraRequest{Name: name})
		req = httptest.NewRequest(http.MethodPost, PathUnload, strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		s.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			t.Fatalf("unload %q: HTTP %d %s", name, w.Code, w.Body.String())
		}
	})
}

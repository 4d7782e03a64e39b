package localserve

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzChatBody: any body gets a JSON answer, a 200 with one choice or an
// OpenAI-style error, never a panic or a hang.
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
		s.ServeHTTP(w, httptest.NewRequest(http.MethodPost, PathChat, strings.NewReader(body)))
		var resp struct {
			Choices []struct {
				FinishReason string `json:"finish_reason"`
			}
			Error *struct{ Message, Type string }
		}
		if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil {
			t.Fatalf("HTTP %d, body %q is not JSON: %v", w.Code, w.Body.String(), err)
		}
		switch {
		case w.Code == http.StatusOK:
			if len(resp.Choices) != 1 || (resp.Choices[0].FinishReason != "stop" && resp.Choices[0].FinishReason != "length") {
				t.Fatalf("200 with %s", w.Body.String())
			}
		case resp.Error == nil || resp.Error.Message == "" || resp.Error.Type == "":
			t.Fatalf("HTTP %d without an error object: %s", w.Code, w.Body.String())
		}
	})
}

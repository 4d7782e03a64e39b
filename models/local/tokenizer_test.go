package local

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/whalerun/whale/schemas"
)

func chat(user, assistant string) []schemas.Message {
	return []schemas.Message{{Role: "user", Content: user}, {Role: "assistant", Content: assistant}}
}

func TestEncode(t *testing.T) {
	for _, tc := range []struct {
		name    string
		msgs    []schemas.Message
		genProm bool
		want    string // rendered tokens
		mask    string // '1' where the assistant wrote the token
	}{
		{"user only", []schemas.Message{{Role: "user", Content: "hi"}}, true,
			"<|bos|><|user|>hi<|end|><|assistant|>", "000000"},
		{"turn", chat("a", "bc"), false,
			"<|bos|><|user|>a<|end|><|assistant|>bc<|end|>", "00000111"},
		{"system and tool", []schemas.Message{{Role: "system", Content: "s"}, {Role: "tool", Content: "t"}}, false,
			"<|bos|><|system|>s<|end|><|tool|>t<|end|>", "0000000"},
		{"tool call", []schemas.Message{{Role: "assistant", ToolCalls: []schemas.ToolCall{{Name: "f", Arguments: `{"x":1}`}}}}, false,
			`<|bos|><|assistant|><tool_call>{"name":"f","arguments":{"x":1}}</tool_call><|end|>`, "00" + strings.Repeat("1", len(`<tool_call>{"name":"f","arguments":{"x":1}}</tool_call>`)+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ids, mask, err := Encode(tc.msgs, tc.genProm)
			if err != nil {
				t.Fatal(err)
			}
			var got, gotMask strings.Builder
			for i, id := range ids {
				got.WriteString(TokenName(id))
				if mask[i] {
					gotMask.WriteByte('1')
				} else {
					gotMask.WriteByte('0')
				}
			}
			if got.String() != tc.want {
				t.Errorf("tokens %q, want %q", got.String(), tc.want)
			}
			if gotMask.String() != tc.mask {
				t.Errorf("mask %s, want %s", gotMask.String(), tc.mask)
			}
		})
	}
	if _, _, err := Encode([]schemas.Message{{Role: "robot"}}, false); err == nil || !strings.Contains(err.Error(), "message 0") {
		t.Errorf("unknown role: err = %v", err)
	}
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		ids  []int
		want string
		stop bool
	}{
		{append(EncodeText("héllo"), TokEnd, 'x'), "héllo", true},
		{append(EncodeText("ab"), TokUser, 'c', TokEOS), "abc", true},
		{EncodeText("open"), "open", false},
	} {
		got, stop := Decode(tc.ids)
		if got != tc.want || stop != tc.stop {
			t.Errorf("Decode(%v) = %q, %v; want %q, %v", tc.ids, got, stop, tc.want, tc.stop)
		}
	}
}

// TestEncodeWithoutToolsUnchanged: conversations without tools render
// byte for byte as before native tools came in (the digest was taken with
// the template of commit 8961460), so the pretrained demo checkpoint sees
// what it was trained on.
func TestEncodeWithoutToolsUnchanged(t *testing.T) {
	convs := [][]schemas.Message{
		{{Role: "user", Content: "hi"}},
		{{Role: "system", Content: "be brief"}, {Role: "developer", Content: "d"}, {Role: "user", Content: "héllo <b>&\n"}, {Role: "assistant", Content: "<answer>7</answer>"}},
		{{Role: "user", Content: "q"}, {Role: "assistant", Content: "let me look", ToolCalls: []schemas.ToolCall{{ID: "1", Name: "search", Arguments: `{ "q" : "a<b",  "n": 2 }`}, {ID: "2", Name: "calc", Arguments: `not json`}}},
			{Role: "tool", Content: "r1", ToolCallID: "1", Name: "search"}, {Role: "tool", Content: "", ToolCallID: "2"}, {Role: "assistant", Content: "<answer>4</answer>"}},
		{{Role: "assistant", ToolCalls: []schemas.ToolCall{{Name: "f"}, {Name: "g", Arguments: `[1,2]`}}}},
	}
	for _, tools := range [][]Tool{nil, {}} {
		h := sha256.New()
		for _, c := range convs {
			for _, gen := range []bool{false, true} {
				ids, mask, err := EncodeTools(c, tools, gen)
				if err != nil {
					t.Fatal(err)
				}
				ids2, mask2, _ := Encode(c, gen)
				if fmt.Sprint(ids, mask) != fmt.Sprint(ids2, mask2) {
					t.Fatalf("EncodeTools with %d tools differs from Encode", len(tools))
				}
				fmt.Fprintf(h, "%v %v %v\n", gen, ids, mask)
			}
		}
		if got := fmt.Sprintf("%x", h.Sum(nil)); got != "19584cd05d450a205c74efeb56b1dedfbb2964d972df712d4636506b993f2507" {
			t.Errorf("tools %v: renderings changed: digest %s", tools, got)
		}
	}
}

func render(ids []int, mask []bool) (string, string) {
	var got, gotMask strings.Builder
	for i, id := range ids {
		got.WriteString(TokenName(id))
		if mask[i] {
			gotMask.WriteByte('1')
		} else {
			gotMask.WriteByte('0')
		}
	}
	return got.String(), gotMask.String()
}

func TestEncodeTools(t *testing.T) {
	tools := []Tool{
		{Name: "search", Description: "search the corpus", Parameters: json.RawMessage(`{"type": "object", "properties": {"q": {"type": "string"}}}`)},
		{Name: "now"},
	}
	msgs := []schemas.Message{
		{Role: "system", Content: "be brief"},
		{Role: "user", Content: "whale?"},
		{Role: "assistant", ToolCalls: []schemas.ToolCall{{ID: "c1", Name: "search", Arguments: `{"q": "whale"}`}}},
		{Role: "tool", Content: "blue", ToolCallID: "c1"},
		{Role: "assistant", Content: "blue"},
	}
	ids, mask, err := EncodeTools(msgs, tools, true)
	if err != nil {
		t.Fatal(err)
	}
	got, gotMask := render(ids, mask)
	want := "<|bos|><|system|><tools>\n" +
		`{"name":"search","description":"search the corpus","parameters":{"properties":{"q":{"type":"string"}},"type":"object"}}` + "\n" +
		`{"name":"now"}` + "\n" +
		"</tools><|end|>" +
		"<|system|>be brief<|end|><|user|>whale?<|end|>" +
		`<|assistant|><tool_call>{"name":"search","arguments":{"q":"whale"}}</tool_call><|end|>` +
		"<|tool|>blue<|end|><|assistant|>blue<|end|><|assistant|>"
	if got != want {
		t.Fatalf("rendered\n%s\nwant\n%s", got, want)
	}
	// The loss covers the assistants' bytes and <|end|>s only.
	call := `<tool_call>{"name":"search","arguments":{"q":"whale"}}</tool_call>`
	var asst strings.Builder
	for i, id := range ids {
		if mask[i] {
			asst.WriteString(TokenName(id))
		}
	}
	if asst.String() != call+"<|end|>blue<|end|>" {
		t.Errorf("assistant tokens %q (mask %s)", asst.String(), gotMask)
	}
	// Every prefix of the conversation renders to a prefix of the whole
	// (the finetune backend finds message spans this way).
	for k := range msgs {
		pre, _, err := EncodeTools(msgs[:k+1], tools, false)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(pre) != fmt.Sprint(ids[:len(pre)]) {
			t.Errorf("the first %d messages do not render to a prefix", k+1)
		}
	}
}

func TestToolsText(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tools []Tool
		want  string
		err   string
	}{
		{"canonical parameters", []Tool{{Name: "f", Parameters: json.RawMessage(" {\"b\": [1, 2.50, 1e3], \"a\": {\"z\": null, \"y\": \"<&>\"}}\n")}},
			"<tools>\n" + `{"name":"f","parameters":{"a":{"y":"\u003c\u0026\u003e","z":null},"b":[1,2.50,1e3]}}` + "\n</tools>", ""},
		{"null parameters left out", []Tool{{Name: "f", Description: "line one\nline two", Parameters: json.RawMessage("null")}},
			"<tools>\n" + `{"name":"f","description":"line one\nline two"}` + "\n</tools>", ""},
		{"no tools", nil, "<tools>\n</tools>", ""},
		{"no name", []Tool{{Description: "x"}}, "", "tool 0: no name"},
		{"bad parameters", []Tool{{Name: "f", Parameters: json.RawMessage(`{"a":`)}}, "", "tool 0 (f): parameters"},
		{"trailing parameters", []Tool{{Name: "f", Parameters: json.RawMessage(`{} {}`)}}, "", "trailing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ToolsText(tc.tools)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v\nwant %q", got, err, tc.want)
			}
		})
	}
	// A schema from a Go map renders like the same schema sent as JSON.
	fromMap, _ := json.Marshal(map[string]any{"type": "object", "required": []string{"q"}, "properties": map[string]any{"q": map[string]any{"type": "string"}}})
	a, err1 := ToolsText([]Tool{{Name: "s", Parameters: fromMap}})
	b, err2 := ToolsText([]Tool{{Name: "s", Parameters: json.RawMessage(`{"properties": {"q": {"type": "string"}}, "type": "object", "required": ["q"]}`)}})
	if err1 != nil || err2 != nil || a != b {
		t.Errorf("map %q (%v) and JSON %q (%v) differ", a, err1, b, err2)
	}
	if _, _, err := EncodeTools(nil, []Tool{{}}, true); err == nil || !strings.Contains(err.Error(), "encode tools") {
		t.Errorf("EncodeTools with a nameless tool: %v", err)
	}
}

// TestToolCallPrefix: the prefix is how the template starts that call.
func TestToolCallPrefix(t *testing.T) {
	for _, name := range []string{"f", `we"ird<name>`, "ünï"} {
		text := messageText(schemas.Message{Role: "assistant", ToolCalls: []schemas.ToolCall{{Name: name, Arguments: `{"x":1}`}}})
		p := ToolCallPrefix(name)
		if !strings.HasPrefix(text, p) || text[len(p):] != `{"x":1}}`+ToolCallClose {
			t.Errorf("name %q: prefix %q of %q", name, p, text)
		}
	}
}

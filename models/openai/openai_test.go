package openai

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeShapes(t *testing.T) {
	cases := []struct {
		name string
		body string
		want ChatRequest
		err  string
	}{
		{"string content", `{"messages":[{"role":"user","content":"hi"}]}`,
			ChatRequest{Messages: []Message{{Role: "user", Content: ptr(Content("hi"))}}}, ""},
		{"null content", `{"messages":[{"role":"assistant","content":null}]}`,
			ChatRequest{Messages: []Message{{Role: "assistant"}}}, ""},
		{"text parts", `{"messages":[{"role":"user","content":[{"type":"text","text":"a "},{"type":"text","text":"b"}]}]}`,
			ChatRequest{Messages: []Message{{Role: "user", Content: ptr(Content("a b"))}}}, ""},
		{"an image part", `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`,
			ChatRequest{}, `content: part 0 has type "image_url"`},
		{"content a number", `{"messages":[{"role":"user","content":1}]}`, ChatRequest{}, "content: want a string or a list of text parts"},
		{"arguments as a string", `{"messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}]}`,
			ChatRequest{Messages: []Message{{Role: "assistant", ToolCalls: []ToolCall{{ID: "c", Type: "function", Function: FunctionCall{Name: "f", Arguments: `{"a":1}`}}}}}}, ""},
		{"arguments as an object", `{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":{"a": 1}}}]}]}`,
			ChatRequest{Messages: []Message{{Role: "assistant", ToolCalls: []ToolCall{{Function: FunctionCall{Name: "f", Arguments: `{"a": 1}`}}}}}}, ""},
		{"arguments null", `{"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":null}}]}]}`,
			ChatRequest{Messages: []Message{{Role: "assistant", ToolCalls: []ToolCall{{Function: FunctionCall{Name: "f"}}}}}}, ""},
		{"stop a string", `{"stop":"x"}`, ChatRequest{Stop: Stop{"x"}}, ""},
		{"stop a list", `{"stop":["x","y"]}`, ChatRequest{Stop: Stop{"x", "y"}}, ""},
		{"stop null", `{"stop":null}`, ChatRequest{}, ""},
		{"stop a number", `{"stop":1}`, ChatRequest{}, "stop: want a string or a list of strings"},
		{"tools", `{"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}},{}]}`,
			ChatRequest{Tools: []Tool{{Type: "function", Function: &Function{Name: "f", Parameters: json.RawMessage(`{"type":"object"}`)}}, {}}}, ""},
		{"sampling zeroes", `{"temperature":0,"top_k":0,"seed":0,"max_tokens":1,"n":1}`,
			ChatRequest{Temperature: ptr(0.0), TopK: ptr(0), Seed: ptr(int64(0)), MaxTokens: ptr(int64(1)), N: ptr(1)}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got ChatRequest
			err := json.Unmarshal([]byte(tc.body), &got)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("decoded %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestEncodeShapes(t *testing.T) {
	cases := []struct {
		name string
		v    any
		want string
	}{
		{"unset fields are left out", ChatRequest{Model: "m", Messages: []Message{{Role: "user", Content: ptr(Content("a"))}}},
			`{"model":"m","messages":[{"role":"user","content":"a"}]}`},
		{"a tool call without content, its empty id sent", Message{Role: "assistant", ToolCalls: []ToolCall{{Type: "function", Function: FunctionCall{Name: "f", Arguments: `{"a":1}`}}}},
			`{"role":"assistant","tool_calls":[{"id":"","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}`},
		{"stop as a list", ChatRequest{Stop: Stop{"x"}}, `{"model":"","messages":null,"stop":["x"]}`},
		{"tool choice modes", ToolChoice("auto"), `"auto"`},
		{"tool choice named", ToolChoice("search"), `{"function":{"name":"search"},"type":"function"}`},
		{"no tool choice", ChatRequest{ToolChoice: ToolChoice("")}, `{"model":"","messages":null}`},
		{"reply with only tool calls", ReplyMessage{Role: "assistant", ToolCalls: []ToolCall{}}, `{"role":"assistant","content":null,"tool_calls":[]}`},
		{"stop reason", Choice{StopReason: StopReasonOf("</a>")}, `{"index":0,"message":{"role":"","content":null,"tool_calls":null},"finish_reason":"","stop_reason":"\u003c/a\u003e"}`},
		{"no stop reason", Choice{StopReason: StopReasonOf("")}, `{"index":0,"message":{"role":"","content":null,"tool_calls":null},"finish_reason":"","stop_reason":null}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tc.want {
				t.Fatalf("encoded\n%s\nwant\n%s", b, tc.want)
			}
		})
	}
}

func TestStopString(t *testing.T) {
	for raw, want := range map[string]string{`"</a>"`: "</a>", `151645`: "", `null`: "", ``: ""} {
		c := Choice{StopReason: json.RawMessage(raw)}
		if got := c.StopString(); got != want {
			t.Errorf("StopString of %s = %q, want %q", raw, got, want)
		}
	}
}

// FuzzChatRequest: whatever decodes, encodes, and decodes again to the
// same request; nothing panics.
func FuzzChatRequest(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"stop":"x","tools":[{"function":{"name":"f"}}]}`,
		`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"f","arguments":{"a":[1,2]}}}]}],"tool_choice":{"type":"function","function":{"name":"f"}}}`,
		`{"stop":["a",""],"temperature":0.5,"seed":-1}`, `{`, `null`, `[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var r ChatRequest
		if json.Unmarshal(body, &r) != nil {
			return
		}
		b, err := json.Marshal(&r)
		if err != nil {
			if strings.Contains(err.Error(), "json: error calling MarshalJSON for type json.RawMessage") {
				return // a raw tool_choice or parameters kept as sent
			}
			t.Fatalf("decoded %+v does not encode: %v", r, err)
		}
		var again ChatRequest
		if err := json.Unmarshal(b, &again); err != nil {
			t.Fatalf("%s does not decode: %v", b, err)
		}
		b2, _ := json.Marshal(&again)
		if string(b) != string(b2) {
			t.Fatalf("round trip changed\n%s\nto\n%s", b, b2)
		}
	})
}

func ptr[T any](v T) *T { return &v }

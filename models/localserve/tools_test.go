package localserve

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/local"
	"github.com/whalerun/whale/models/openai"
	"github.com/whalerun/whale/schemas"
)

func TestParseToolSpec(t *testing.T) {
	const f = `[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"}}},{"function":{"name":"g"}}]`
	cases := []struct {
		name, tools, choice string
		want                string // choice mode, or "named:<name>"
		ntools              int
		err                 string
	}{
		{"no tools", ``, ``, "none", 0, ""},
		{"tools default to auto", f, ``, "auto", 2, ""},
		{"null choice", f, `null`, "auto", 2, ""},
		{"empty tools, no choice", `[]`, ``, "none", 0, ""},
		{"auto", f, `"auto"`, "auto", 2, ""},
		{"none keeps the tools", f, `"none"`, "none", 2, ""},
		{"none without tools", ``, `"none"`, "none", 0, ""},
		{"required", f, `"required"`, "required", 2, ""},
		{"required with no tools acts as none", `[]`, `"required"`, "none", 0, ""},
		{"auto with an empty list", `[]`, `"auto"`, "auto", 0, ""},
		{"named", f, `{"type":"function","function":{"name":"g"}}`, "named:g", 2, ""},
		{"named without type", f, `{"function":{"name":"f"}}`, "named:f", 2, ""},
		{"unknown string", f, `"any"`, "", 0, "Invalid value for `tool_choice`: any!"},
		{"number", f, `3`, "", 0, "Invalid value for `tool_choice`: 3!"},
		{"list", f, `["auto"]`, "", 0, "Invalid value for `tool_choice`"},
		{"auto without tools", ``, `"auto"`, "", 0, "`tools` must be set"},
		{"required without tools", ``, `"required"`, "", 0, "`tools` must be set"},
		{"named without tools", ``, `{"type":"function","function":{"name":"f"}}`, "", 0, "`tools` must be set"},
		{"named unknown tool", f, `{"type":"function","function":{"name":"h"}}`, "", 0, "does not match any of the specified `tools`"},
		{"named in an empty list", `[]`, `{"type":"function","function":{"name":"h"}}`, "", 0, "does not match any"},
		{"named bad type", f, `{"type":"tool","function":{"name":"f"}}`, "", 0, "Invalid `type`"},
		{"named no function", f, `{"type":"function"}`, "", 0, "Invalid value for `function`"},
		{"named function not an object", f, `{"type":"function","function":"f"}`, "", 0, "Invalid value for `function`"},
		{"named no name", f, `{"type":"function","function":{}}`, "", 0, "Expected field `name`"},
		{"named empty name", f, `{"type":"function","function":{"name":""}}`, "", 0, "Invalid `name`"},
		{"named name not a string", f, `{"type":"function","function":{"name":1}}`, "", 0, "Invalid `name`"},
		{"tool of another type", `[{"type":"code_interpreter","function":{"name":"f"}}]`, ``, "", 0, `only "function" tools`},
		{"tool without function", `[{"type":"function"}]`, ``, "", 0, "field `function` is required"},
		{"tool without name", `[{"type":"function","function":{"description":"x"}}]`, ``, "", 0, "name is required"},
		{"parameters not an object", `[{"type":"function","function":{"name":"f","parameters":[1]}}]`, ``, "", 0, "want a JSON object"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"messages":[{"role":"user","content":"x"}]`
			if tc.tools != "" {
				body += `,"tools":` + tc.tools
			}
			if tc.choice != "" {
				body += `,"tool_choice":` + tc.choice
			}
			var req openai.ChatRequest
			if err := json.Unmarshal([]byte(body+"}"), &req); err != nil {
				t.Fatal(err)
			}
			spec, err := parseToolSpec(req.Tools, req.Tools != nil, req.ToolChoice)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := spec.choice
			if got == choiceNamed {
				got += ":" + spec.name
			}
			if got != tc.want || len(spec.tools) != tc.ntools {
				t.Fatalf("choice %s with %d tools, want %s with %d", got, len(spec.tools), tc.want, tc.ntools)
			}
		})
	}
}

type call struct{ name, args string }

func calls(tcs []schemas.ToolCall) []call {
	var out []call
	for _, tc := range tcs {
		out = append(out, call{tc.Name, tc.Arguments})
	}
	return out
}

func TestParseToolCalls(t *testing.T) {
	cases := []struct {
		name, text, content string
		calls               []call
		ok                  bool
	}{
		{"plain text", "the answer is 4", "the answer is 4", nil, false},
		{"one call", `<tool_call>{"name":"f","arguments":{"x":1}}</tool_call>`, "", []call{{"f", `{"x":1}`}}, true},
		{"text then a call", "let me look\n" + `<tool_call>{"name":"f","arguments":{}}</tool_call>`, "let me look", []call{{"f", `{}`}}, true},
		{"only one newline is the template's", "a\n\n" + `<tool_call>{"name":"f","arguments":{}}</tool_call>`, "a\n", []call{{"f", `{}`}}, true},
		{"no newline before the call", `a<tool_call>{"name":"f","arguments":{}}</tool_call>`, "a", []call{{"f", `{}`}}, true},
		{"two calls", `<tool_call>{"name":"f","arguments":{"q":"a b"}}</tool_call>` + "\n" + `<tool_call>{"name":"g","arguments":{"n":[1, 2]}}</tool_call>`,
			"", []call{{"f", `{"q":"a b"}`}, {"g", `{"n":[1,2]}`}}, true},
		{"hermes spacing", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1, \"y\": \"<b>\"}}\n</tool_call>", "", []call{{"f", `{"x":1,"y":"<b>"}`}}, true},
		{"key order and other keys", `<tool_call>{"arguments":{"b":1,"a":2},"id":"x","name":"f"}</tool_call>`, "", []call{{"f", `{"b":1,"a":2}`}}, true},
		{"text after the calls is dropped", `<tool_call>{"name":"f","arguments":{}}</tool_call> and more`, "", []call{{"f", `{}`}}, true},
		{"open last call that is whole", `<tool_call>{"name":"f","arguments":{}}`, "", []call{{"f", `{}`}}, true},
		{"unknown tool name passes", `<tool_call>{"name":"nope","arguments":{}}</tool_call>`, "", []call{{"nope", `{}`}}, true},
		{"empty name passes", `<tool_call>{"name":"","arguments":{}}</tool_call>`, "", []call{{"", `{}`}}, true},
		{"open last call cut short", `<tool_call>{"name":"f","argu`, `<tool_call>{"name":"f","argu`, nil, false},
		{"one bad block spoils all", `x` + "\n" + `<tool_call>{"name":"f","arguments":{}}</tool_call><tool_call>{oops}</tool_call>`,
			`x` + "\n" + `<tool_call>{"name":"f","arguments":{}}</tool_call><tool_call>{oops}</tool_call>`, nil, false},
		{"not JSON", `<tool_call>search(q=1)</tool_call>`, `<tool_call>search(q=1)</tool_call>`, nil, false},
		{"empty block", `<tool_call></tool_call>`, `<tool_call></tool_call>`, nil, false},
		{"no name", `<tool_call>{"arguments":{}}</tool_call>`, `<tool_call>{"arguments":{}}</tool_call>`, nil, false},
		{"name not a string", `<tool_call>{"name":3,"arguments":{}}</tool_call>`, `<tool_call>{"name":3,"arguments":{}}</tool_call>`, nil, false},
		{"no arguments", `<tool_call>{"name":"f"}</tool_call>`, `<tool_call>{"name":"f"}</tool_call>`, nil, false},
		{"arguments a string", `<tool_call>{"name":"f","arguments":"{\"x\":1}"}</tool_call>`, `<tool_call>{"name":"f","arguments":"{\"x\":1}"}</tool_call>`, nil, false},
		{"arguments null", `<tool_call>{"name":"f","arguments":null}</tool_call>`, `<tool_call>{"name":"f","arguments":null}</tool_call>`, nil, false},
		{"two objects in a block", `<tool_call>{"name":"f","arguments":{}}{"name":"g","arguments":{}}</tool_call>`, `<tool_call>{"name":"f","arguments":{}}{"name":"g","arguments":{}}</tool_call>`, nil, false},
		{"a list in a block", `<tool_call>[{"name":"f","arguments":{}}]</tool_call>`, `<tool_call>[{"name":"f","arguments":{}}]</tool_call>`, nil, false},
	}
	ids := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			content, got, ok := parseToolCalls(tc.text)
			if content != tc.content || ok != tc.ok || !reflect.DeepEqual(calls(got), tc.calls) {
				t.Fatalf("got %q %v %v, want %q %v %v", content, calls(got), ok, tc.content, tc.calls, tc.ok)
			}
			for _, c := range got {
				if !strings.HasPrefix(c.ID, "chatcmpl-tool-") || len(c.ID) != len("chatcmpl-tool-")+32 || ids[c.ID] {
					t.Errorf("id %q: want chatcmpl-tool- and 32 hex digits, unique", c.ID)
				}
				ids[c.ID] = true
			}
		})
	}
}

// assistantText is the text the template writes for an assistant message.
func assistantText(t *testing.T, m schemas.Message) string {
	t.Helper()
	ids, _, err := local.Encode([]schemas.Message{m}, false)
	if err != nil {
		t.Fatal(err)
	}
	text, _ := local.Decode(ids[2:]) // after <|bos|><|assistant|>
	return text
}

// TestToolCallsRenderBack: a reply parsed from the template's form renders
// back to the same text, so a rollout's history and the finetune rows
// built from it show the model what it wrote.
func TestToolCallsRenderBack(t *testing.T) {
	for _, m := range []schemas.Message{
		{Role: "assistant", ToolCalls: []schemas.ToolCall{{Name: "f", Arguments: `{"x":1}`}}},
		{Role: "assistant", Content: "let me look", ToolCalls: []schemas.ToolCall{{Name: "search", Arguments: `{"q":"a<b & c","n":[1,2.5]}`}, {Name: "now", Arguments: `{}`}}},
		{Role: "assistant", Content: "two lines\nof text", ToolCalls: []schemas.ToolCall{{Name: `we"ird`, Arguments: `{"nested":{"z":1,"a":{}}}`}}},
	} {
		text := assistantText(t, m)
		content, got, ok := parseToolCalls(text)
		if !ok {
			t.Fatalf("%q did not parse", text)
		}
		back := schemas.Message{Role: "assistant", Content: content, ToolCalls: got}
		if again := assistantText(t, back); again != text {
			t.Errorf("rendered %q, parsed and rendered again %q", text, again)
		}
	}
}

func TestReply(t *testing.T) {
	tools := []local.Tool{{Name: "f"}, {Name: "g"}}
	auto := toolSpec{tools: tools, choice: choiceAuto}
	required := toolSpec{tools: tools, choice: choiceRequired}
	named := toolSpec{tools: tools, choice: choiceNamed, name: "f"}
	null := func() *string { return nil }
	str := func(s string) *string { return &s }
	cases := []struct {
		name       string
		spec       toolSpec
		stop       []string
		gen        local.Generation
		content    *string
		calls      []call
		finish     string
		stopReason *string
		completion int
	}{
		{"text", toolSpec{}, nil, local.Generation{Text: "yes", FinishReason: "stop", CompletionTokens: 4}, str("yes"), nil, "stop", nil, 4},
		{"length", toolSpec{}, nil, local.Generation{Text: "ye", FinishReason: "length", CompletionTokens: 2}, str("ye"), nil, "length", nil, 2},
		{"stop string", toolSpec{}, []string{"s", "e"}, local.Generation{Text: "yes", FinishReason: "stop", CompletionTokens: 4}, str("y"), nil, "stop", str("e"), 2},
		{"stop string not met", toolSpec{}, []string{"x"}, local.Generation{Text: "yes", FinishReason: "length", CompletionTokens: 3}, str("yes"), nil, "length", nil, 3},
		{"tool call text without tools", toolSpec{}, nil, local.Generation{Text: `<tool_call>{"name":"f","arguments":{}}</tool_call>`, FinishReason: "stop"},
			str(`<tool_call>{"name":"f","arguments":{}}</tool_call>`), nil, "stop", nil, 0},
		{"tool_choice none", toolSpec{tools: tools, choice: choiceNone}, nil, local.Generation{Text: `<tool_call>{"name":"f","arguments":{}}</tool_call>`, FinishReason: "stop"},
			str(`<tool_call>{"name":"f","arguments":{}}</tool_call>`), nil, "stop", nil, 0},
		{"auto call", auto, nil, local.Generation{Text: `<tool_call>{"name":"f","arguments":{"x":1}}</tool_call>`, FinishReason: "stop", CompletionTokens: 43},
			null(), []call{{"f", `{"x":1}`}}, "tool_calls", nil, 43},
		{"auto text and call", auto, nil, local.Generation{Text: "hm\n" + `<tool_call>{"name":"g","arguments":{}}</tool_call>`, FinishReason: "stop"},
			str("hm"), []call{{"g", `{}`}}, "tool_calls", nil, 0},
		{"auto call cut by length still tool_calls", auto, nil, local.Generation{Text: `<tool_call>{"name":"f","arguments":{}}</tool_call>` + "\n<tool", FinishReason: "length"},
			null(), []call{{"f", `{}`}}, "tool_calls", nil, 0},
		{"auto malformed", auto, nil, local.Generation{Text: `<tool_call>{"name":"f","arguments":{`, FinishReason: "length"},
			str(`<tool_call>{"name":"f","arguments":{`), nil, "length", nil, 0},
		{"auto plain text", auto, nil, local.Generation{Text: "4", FinishReason: "stop"}, str("4"), nil, "stop", nil, 0},
		{"auto call ended by a stop string", auto, []string{"</tool_call>"}, local.Generation{Text: `<tool_call>{"name":"f","arguments":{}}</tool_call>xyz`, FinishReason: "length", CompletionTokens: 60},
			null(), []call{{"f", `{}`}}, "tool_calls", str("</tool_call>"), len(`<tool_call>{"name":"f","arguments":{}}</tool_call>`)},
		{"required", required, nil, local.Generation{Text: `{"name":"g","arguments":{}}</tool_call>`, FinishReason: "stop"},
			str(""), []call{{"g", `{}`}}, "tool_calls", nil, 0},
		{"required cut by length", required, nil, local.Generation{Text: `{"name":"g","arguments":{}}</tool_call>` + "\n<tool_call>", FinishReason: "length"},
			str(`<tool_call>{"name":"g","arguments":{}}</tool_call>` + "\n<tool_call>"), nil, "length", nil, 0},
		{"required malformed", required, nil, local.Generation{Text: `hello`, FinishReason: "stop"}, str(`<tool_call>hello`), nil, "stop", nil, 0},
		{"named", named, nil, local.Generation{Text: `{"x":1}}</tool_call>` + "\n" + `<tool_call>{"name":"g","arguments":{}}</tool_call>`, FinishReason: "stop", CompletionTokens: 70},
			str(""), []call{{"f", `{"x":1}`}}, "stop", nil, len(`{"x":1}}</tool_call>`)},
		{"named without the closing tag", named, nil, local.Generation{Text: `{"x":1}}`, FinishReason: "stop", CompletionTokens: 9},
			str(""), []call{{"f", `{"x":1}`}}, "stop", nil, 9},
		{"named malformed", named, nil, local.Generation{Text: `{"x":`, FinishReason: "length", CompletionTokens: 5},
			str(`<tool_call>{"name":"f","arguments":{"x":`), nil, "length", nil, 5},
	}
	s := &Server{log: slog.New(slog.DiscardHandler)}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := &job{stop: tc.stop, tools: tc.spec, prefill: tc.spec.prefill()}
			resp := s.reply(&served{name: "base"}, j, tc.gen)
			b, _ := json.Marshal(resp)
			ch := resp.Choices[0]
			var got []call
			for _, c := range ch.Message.ToolCalls {
				if c.Type != "function" || !strings.HasPrefix(c.ID, "chatcmpl-tool-") {
					t.Errorf("call %+v", c)
				}
				got = append(got, call{c.Function.Name, string(c.Function.Arguments)})
			}
			var stopReason *string
			if ch.StopReason != nil {
				s := ch.StopString()
				stopReason = &s
			}
			if !reflect.DeepEqual((*string)(ch.Message.Content), tc.content) || !reflect.DeepEqual(got, tc.calls) || ch.FinishReason != tc.finish ||
				!reflect.DeepEqual(stopReason, tc.stopReason) || resp.Usage.CompletionTokens != int64(tc.completion) {
				t.Errorf("reply %s\nwant content %v calls %v finish %s stop_reason %v completion %d", b, deref(tc.content), tc.calls, tc.finish, deref(tc.stopReason), tc.completion)
			}
			if !strings.Contains(string(b), `"tool_calls":[`) {
				t.Errorf("tool_calls is not a list: %s", b)
			}
		})
	}
}

func deref(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

// toolModel overfits a model on two exchanges: "hi" answered "yes"
// without tools, and with the tool f offered, "hi" answered with a call of
// f.
func toolModel(t *testing.T) (*local.Model, []local.Tool) {
	t.Helper()
	cfg := tinyCfg
	cfg.Context = 160
	m, err := local.New(cfg, 7)
	if err != nil {
		t.Fatal(err)
	}
	tools := []local.Tool{{Name: "f", Parameters: json.RawMessage(`{"type":"object"}`)}}
	plain, pmask, err := local.Encode([]schemas.Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "yes"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	withTools, tmask, err := local.EncodeTools([]schemas.Message{{Role: "user", Content: "hi"},
		{Role: "assistant", ToolCalls: []schemas.ToolCall{{Name: "f", Arguments: `{"x":1}`}}}}, tools, false)
	if err != nil {
		t.Fatal(err)
	}
	batch := []local.Example{{Tokens: plain, Mask: pmask}, {Tokens: withTools, Mask: tmask}}
	for range 200 {
		if _, err := m.TrainStep(context.Background(), batch, local.TrainOptions{LR: 1e-2, ClipNorm: 1}); err != nil {
			t.Fatal(err)
		}
	}
	return m, tools
}

// TestToolsEndToEnd: the tools of a request reach the prompt, the call the
// model writes comes back as tool_calls through whale's client, and a
// request without tools still gets the plain answer.
func TestToolsEndToEnd(t *testing.T) {
	m, _ := toolModel(t)
	f := start(t, m, Options{})
	tools := []models.Tool{{Name: "f", Parameters: map[string]any{"type": "object"}}}
	hi := []schemas.Message{{Role: "user", Content: "hi"}}
	r, err := f.client.Chat(context.Background(), models.Request{Messages: hi, Sampling: greedy(60)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Content != "yes" || len(r.ToolCalls) != 0 || r.FinishReason != "stop" {
		t.Fatalf("without tools: %q %+v %s", r.Content, r.ToolCalls, r.FinishReason)
	}
	r, err = f.client.Chat(context.Background(), models.Request{Messages: hi, Tools: tools, Sampling: greedy(60)})
	if err != nil {
		t.Fatal(err)
	}
	if r.Content != "" || len(r.ToolCalls) != 1 || r.ToolCalls[0].Name != "f" || r.ToolCalls[0].Arguments != `{"x":1}` || r.FinishReason != "tool_calls" {
		t.Fatalf("with tools: %q %+v %s", r.Content, r.ToolCalls, r.FinishReason)
	}
	ids, _, _ := local.EncodeTools(hi, []local.Tool{{Name: "f", Parameters: json.RawMessage(`{"type":"object"}`)}}, true)
	if r.PromptTokens != int64(len(ids)) {
		t.Errorf("prompt tokens %d, want %d (the tools block rendered)", r.PromptTokens, len(ids))
	}
	// The answer goes back into the history and renders as the model wrote
	// it: the next prompt starts with the tokens the model was trained on.
	// The prefix cache then hands the second call every row of the first:
	// its prompt and what the model wrote, but the last token (never fed).
	hist := append(append([]schemas.Message{}, hi...), r.Message(), schemas.Message{Role: "tool", Content: "1", ToolCallID: r.ToolCalls[0].ID})
	before := f.srv.PrefixStats()
	r2, err := f.client.Chat(context.Background(), models.Request{Messages: hist, Tools: tools, Sampling: greedy(4)})
	if err != nil {
		t.Fatal(err)
	}
	after := f.srv.PrefixStats()
	if reused, want := after.ReusedRows-before.ReusedRows, r.PromptTokens+r.CompletionTokens-1; reused != want {
		t.Errorf("second call took %d prompt rows from the cache, want %d (the first call's %d prompt and %d completion tokens, the last not fed)", reused, want, r.PromptTokens, r.CompletionTokens)
	}
	if fed := after.FedRows - before.FedRows; fed+(after.ReusedRows-before.ReusedRows) != r2.PromptTokens {
		t.Errorf("second call: %d rows fed and %d cached for %d prompt tokens", fed, after.ReusedRows-before.ReusedRows, r2.PromptTokens)
	}

	root := strings.TrimSuffix(f.url, "/v1")
	for _, tc := range []struct {
		name, choice, want string
	}{
		{"none", `"none"`, `"content":"\u003ctool_call\u003e{\"name\":\"f\",\"arguments\":{\"x\":1}}\u003c/tool_call\u003e","tool_calls":[]},"finish_reason":"stop"`},
		{"required", `"required"`, `"content":"","tool_calls":[{"id":"ID","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},"finish_reason":"tool_calls"`},
		{"named", `{"type":"function","function":{"name":"f"}}`, `"content":"","tool_calls":[{"id":"ID","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},"finish_reason":"stop"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":%s,"temperature":0,"max_tokens":60}`, tc.choice)
			status, text := post(t, root+PathChat, json.RawMessage(body))
			if status != http.StatusOK {
				t.Fatalf("HTTP %d %s", status, text)
			}
			var resp openai.ChatCompletion
			if err := json.Unmarshal([]byte(text), &resp); err != nil {
				t.Fatal(err)
			}
			norm := text
			for _, c := range resp.Choices[0].Message.ToolCalls {
				norm = strings.Replace(norm, c.ID, "ID", 1)
			}
			if !strings.Contains(norm, tc.want) {
				t.Errorf("reply %s\nwant it to hold %s", text, tc.want)
			}
		})
	}
}

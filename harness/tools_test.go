package harness

import (
	"strings"
	"testing"
)

func toolContract() *Contract {
	return Base().Extend(Contract{
		Name: "tooly",
		Tools: []ToolSpec{
			{Name: "search", Description: "Search.", Parameters: map[string]any{
				"type": "object", "properties": map[string]any{"query_list": map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "minItems": 1}},
				"required": []any{"query_list"},
			}},
			{Name: "calc", Description: "Calculate.", Parameters: map[string]any{"type": "object", "properties": map[string]any{"expr": map[string]any{"type": "string"}}}},
		},
	})
}

func TestToolsLoad(t *testing.T) {
	h := mustLoad(t, `TOOLS = ["search", {"name": "calc", "description": "Add numbers."}]
TOOL_CHOICE = "calc"
STOP = ["</answer>"]
`, Options{Contract: toolContract()})
	tools := h.Tools()
	if len(tools) != 2 || tools[0].Name != "search" || tools[0].Description != "Search." || tools[1].Description != "Add numbers." || tools[1].Parameters["type"] != "object" {
		t.Fatalf("tools %+v", tools)
	}
	if h.ToolChoice() != "calc" || len(h.Stop()) != 1 || h.Stop()[0] != "</answer>" {
		t.Errorf("tool choice %q stop %q", h.ToolChoice(), h.Stop())
	}
	search, _ := h.Tool("search")
	for _, tc := range []struct {
		args map[string]any
		want string // "" = valid
	}{
		{map[string]any{"query_list": []any{"a", "b"}}, ""},
		{map[string]any{"query_list": []any{}}, "/query_list: minItems"},
		{map[string]any{"query_list": "a"}, "/query_list: got string, want array"},
		{map[string]any{"query_list": []any{1.0}}, "/query_list/0: got number, want string"},
		{map[string]any{}, "missing property 'query_list'"},
	} {
		err := search.CheckArgs(tc.args)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckArgs(%v) = %v, want %q", tc.args, err, tc.want)
		}
	}
	if h := mustLoad(t, "", Options{Contract: toolContract()}); h.Tools() != nil || h.ToolChoice() != "" || len(h.Stop()) != 0 {
		t.Errorf("a harness without TOOLS offers %+v", h.Tools())
	}
}

func TestToolsLoadErrors(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"unknown tool", "X = 1\nTOOLS = [\"grep\"]\n", `h.star:2:1: constant TOOLS[0]: domain tooly offers no tool "grep" (it offers search, calc)`},
		{"listed twice", "TOOLS = [\"calc\", {\"name\": \"calc\"}]\n", `TOOLS[1]: tool "calc" is listed twice`},
		{"not an object schema", "TOOLS = [{\"name\": \"calc\", \"parameters\": {\"type\": \"string\"}}]\n", `parameters must be a JSON schema with "type": "object"`},
		{"bad schema", "TOOLS = [{\"name\": \"calc\", \"parameters\": {\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"nope\"}}}}]\n", "not a valid JSON schema"},
		{"ref to a file", "TOOLS = [{\"name\": \"calc\", \"parameters\": {\"type\": \"object\", \"properties\": {\"x\": {\"$ref\": \"file:///etc/passwd\"}}}}]\n", "a tool schema may only refer to itself"},
		{"entry of the wrong shape", "TOOLS = [3]\n", "constant TOOLS"},
		{"choice without tools", "TOOL_CHOICE = \"auto\"\n", `h.star:1:1: constant TOOL_CHOICE "auto" needs TOOLS`},
		{"choice of another tool", "TOOLS = [\"calc\"]\nTOOL_CHOICE = \"search\"\n", `TOOL_CHOICE "search": want auto, none, required or the name of a tool in TOOLS`},
		{"stop of the wrong shape", "STOP = [1]\n", "constant STOP"},
		{"empty stop", "STOP = [\"</a>\", \"\"]\n", `h.star:1:1: constant STOP: STOP[1]: want non-empty string, got string ""`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := loadErr(t, tc.src, Options{Contract: toolContract()})
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
	if _, err := Load("h.star", []byte("TOOLS = [\"search\"]\n"), Options{}); err == nil || !strings.Contains(err.Error(), "domain base offers no native tools") {
		t.Errorf("TOOLS on a contract without tools: %v", err)
	}
}

func TestActionEndAndMessageReasoning(t *testing.T) {
	for _, tc := range []struct {
		v    map[string]any
		end  int
		want string
	}{
		{map[string]any{"kind": "answer", "answer": "x", "end": int64(3)}, 3, ""},
		{map[string]any{"kind": "answer", "answer": "x"}, -1, ""},
		{map[string]any{"kind": "invalid", "end": "no"}, -1, ""},
		{map[string]any{"kind": "tool", "tool": "t", "end": int64(-5)}, 0, "want a byte offset >= 0"},
	} {
		a, err := ActionFrom(tc.v)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) || err == nil && a.End != tc.end {
			t.Errorf("ActionFrom(%v) = end %d, %v", tc.v, a.End, err)
		}
	}
	_, err := MessagesFrom([]any{map[string]any{"role": "user", "content": "q", "reasoning": "r"}})
	if err == nil || !strings.Contains(err.Error(), "reasoning on a user message") {
		t.Errorf("reasoning on a user message: %v", err)
	}
}

func TestContractValidatesTools(t *testing.T) {
	bad := Base().Extend(Contract{Tools: []ToolSpec{{Name: "x y", Parameters: map[string]any{"type": "object"}}, {Name: "z", Parameters: map[string]any{}}}})
	err := bad.Validate()
	if err == nil || !strings.Contains(err.Error(), `tool "x y": not an identifier`) || !strings.Contains(err.Error(), `tool z: parameters must be`) {
		t.Errorf("Validate = %v", err)
	}
}

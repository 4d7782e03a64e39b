package harness

import (
	"fmt"

	"github.com/whalerun/whale/schemas"
)

// MessagesFrom converts what build_messages returned (a list of message
// dicts, already validated by Call) into schemas.Message values.
func MessagesFrom(v any) ([]schemas.Message, error) {
	if err := MessagesShape.Validate(v, "messages"); err != nil {
		return nil, err
	}
	list := v.([]any)
	out := make([]schemas.Message, len(list))
	for i, e := range list {
		d := e.(map[string]any)
		m := schemas.Message{Role: d["role"].(string), Content: d["content"].(string)}
		m.Name, _ = d["name"].(string)
		m.ToolCallID, _ = d["tool_call_id"].(string)
		m.Reasoning, _ = d["reasoning"].(string)
		if m.Reasoning != "" && m.Role != "assistant" {
			return nil, fmt.Errorf("messages[%d]: reasoning on a %s message: only the model's (assistant) messages have reasoning", i, m.Role)
		}
		if calls, ok := d["tool_calls"].([]any); ok {
			m.ToolCalls = make([]schemas.ToolCall, len(calls))
			for j, c := range calls {
				cd := c.(map[string]any)
				tc := schemas.ToolCall{Name: cd["name"].(string), Arguments: cd["arguments"].(string)}
				tc.ID, _ = cd["id"].(string)
				m.ToolCalls[j] = tc
			}
		}
		out[i] = m
	}
	return out, nil
}

// Action is what parse_action returned, typed.
type Action struct {
	Kind   string // "answer", "tool", "move" or "invalid"
	Answer string // kind answer
	Tool   string // kind tool: the tool's name
	Input  string // kind tool: its text input (a query, code)
	Args   map[string]any
	ID     string // kind tool: the native tool call's id, if any
	Move   string // kind move
	Error  string // kind invalid: why
	// End, when the harness set it, is the byte offset in the reply where
	// the action ends: the loop keeps reply[:End] as the assistant message,
	// so nothing the model wrote after its action is stored or trained on.
	// -1 when not set.
	End int
	// Raw is the whole dict, extra keys included.
	Raw map[string]any
}

// ActionFrom converts what parse_action returned into an Action.
func ActionFrom(v any) (Action, error) {
	if err := ActionShape.Validate(v, "action"); err != nil {
		return Action{}, err
	}
	d := v.(map[string]any)
	a := Action{Raw: d}
	a.Kind, _ = d["kind"].(string)
	a.Answer, _ = d["answer"].(string)
	a.Tool, _ = d["tool"].(string)
	a.Input, _ = d["input"].(string)
	a.Args, _ = d["args"].(map[string]any)
	a.ID, _ = d["id"].(string)
	a.Move, _ = d["move"].(string)
	a.Error, _ = d["error"].(string)
	a.End = -1
	if v, ok := d["end"]; ok && a.Kind != "invalid" {
		end, ok := v.(int64)
		if !ok || end < 0 {
			return Action{}, fmt.Errorf("action.end: want a byte offset >= 0 into the reply, got %s", describe(v))
		}
		a.End = int(end)
	}
	return a, nil
}

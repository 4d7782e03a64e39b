package harness

import (
	"math"

	"github.com/whalerun/whale/schemas"
)

// State is the episode state of Base's StateDoc as an episode loop keeps
// it. Dict is the one place its keys are spelled: hooks get that dict, a
// harness hook as a fresh Starlark copy, a Go default as plain Go.
type State struct {
	// Task is {id, question, meta} as hooks may see it (never the
	// reference answers).
	Task map[string]any
	// Turn is the number of model calls made so far.
	Turn int
	// Messages is the transcript, without the system message.
	Messages []schemas.Message
	// LastAction is what parse_action made of the latest reply; nil is None.
	LastAction map[string]any
	// FormatRetries and IllegalRetries are the retries used so far.
	FormatRetries, IllegalRetries int
}

// Dict is the state dict hooks receive, as values Call converts: a
// harness hook gets it as fresh Starlark values, a Go default as fresh
// plain Go (see FromStarlark). It shares Task, LastAction and Messages
// with s.
func (s *State) Dict() map[string]any {
	var last any // None, not an empty dict, when there is no action
	if s.LastAction != nil {
		last = s.LastAction
	}
	return map[string]any{
		"task":        s.Task,
		"turn":        int64(s.Turn),
		"messages":    s.Messages,
		"last_action": last,
		"retries":     map[string]any{"format": int64(s.FormatRetries), "illegal": int64(s.IllegalRetries)},
	}
}

// MessageDict is m as hooks see a message, in plain Go (see
// messageFields). MessagesFrom is its inverse.
func MessageDict(m schemas.Message) map[string]any {
	v, _, _ := normalizer{b: &budget{maxBytes: math.MaxInt, maxItems: math.MaxInt}}.conv(messageFields(m), 0) // strings only: it cannot fail
	return v.(map[string]any)
}

// MessageDicts is MessageDict of each message, as a list.
func MessageDicts(msgs []schemas.Message) []any {
	out := make([]any, len(msgs))
	for i, m := range msgs {
		out[i] = MessageDict(m)
	}
	return out
}

// messageFields is the one conversion of a schemas.Message into harness
// values: role and content, then the optional keys that are set (name,
// tool_call_id, reasoning, tool_calls of {id, name, arguments}). In Starlark the keys
// keep this order, which reads best in a repr; plain Go gets a map.
func messageFields(m schemas.Message) fields {
	f := fields{{"role", m.Role}, {"content", m.Content}}
	if m.Name != "" {
		f = append(f, field{"name", m.Name})
	}
	if m.ToolCallID != "" {
		f = append(f, field{"tool_call_id", m.ToolCallID})
	}
	if m.Reasoning != "" {
		f = append(f, field{"reasoning", m.Reasoning})
	}
	if len(m.ToolCalls) > 0 {
		calls := make([]any, len(m.ToolCalls))
		for i, tc := range m.ToolCalls {
			calls[i] = toolCallFields(tc)
		}
		f = append(f, field{"tool_calls", calls})
	}
	return f
}

func toolCallFields(tc schemas.ToolCall) fields {
	return fields{{"id", tc.ID}, {"name", tc.Name}, {"arguments", tc.Arguments}}
}

// fields is a dict whose keys keep their order when converted to Starlark
// (ToStarlark sorts a map's keys).
type fields []field

type field struct {
	key   string
	value any
}

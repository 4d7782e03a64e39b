package models

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/whalerun/whale/models/openai"
	"github.com/whalerun/whale/schemas"
)

// toWire maps whale messages to the wire. Roles are system, developer, user,
// assistant and tool; anything else is refused before a request is made.
func toWire(msgs []schemas.Message) ([]openai.Message, error) {
	out := make([]openai.Message, len(msgs))
	texts := make([]openai.Content, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		texts[i] = openai.Content(m.Content)
		w := openai.Message{Role: m.Role, Name: m.Name, Content: &texts[i]}
		switch m.Role {
		case "system", "developer", "user":
		case "assistant":
			if m.Content == "" && len(m.ToolCalls) > 0 {
				w.Content = nil
			}
			// Inside a tool-call chain Qwen3's template renders an earlier
			// turn's reasoning: the model must see at rollout what the
			// trainer renders.
			w.ReasoningContent, w.Reasoning = m.Reasoning, m.Reasoning
			if len(m.ToolCalls) > 0 {
				w.ToolCalls = make([]openai.ToolCall, len(m.ToolCalls))
				for j, tc := range m.ToolCalls {
					w.ToolCalls[j] = openai.ToolCall{ID: tc.ID, Type: "function",
						Function: openai.FunctionCall{Name: tc.Name, Arguments: openai.Arguments(tc.Arguments)}}
				}
			}
		case "tool":
			if m.ToolCallID == "" {
				return nil, fmt.Errorf("message %d: tool message without tool_call_id", i)
			}
			w.ToolCallID = m.ToolCallID
		default:
			return nil, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
		if m.Role != "assistant" && len(m.ToolCalls) > 0 {
			return nil, fmt.Errorf("message %d: role %s cannot carry tool calls", i, m.Role)
		}
		out[i] = w
	}
	return out, nil
}

// ToolsJSON is tools as the request's tools array, in JSON: what a chat
// template renders, kept with the rollout so that training renders the
// same.
func ToolsJSON(tools []Tool) (string, error) {
	w, err := toWireTools(tools)
	if err != nil {
		return "", err
	}
	data, err := json.Marshal(w)
	if err != nil {
		return "", fmt.Errorf("tools as JSON: %w", err)
	}
	return string(data), nil
}

func toWireTools(tools []Tool) ([]openai.Tool, error) {
	if len(tools) == 0 {
		return nil, nil
	}
	out := make([]openai.Tool, len(tools))
	for i, t := range tools {
		if t.Name == "" {
			return nil, fmt.Errorf("tool %d: no name", i)
		}
		f := &openai.Function{Name: t.Name, Description: t.Description}
		if t.Parameters != nil {
			p, err := json.Marshal(t.Parameters)
			if err != nil {
				return nil, fmt.Errorf("tool %s: parameters: %w", t.Name, err)
			}
			f.Parameters = p
		}
		out[i] = openai.Tool{Type: "function", Function: f}
	}
	return out, nil
}

// decodeCompletion reads the first choice of a chat.completion body.
//
// A tool call without an id gets call_<index>, so that the harness can
// always answer it with a tool message; custom (non-function) calls are
// skipped: whale declares only function tools. The reasoning text is the
// one a server's reasoning parser split out (vLLM/SGLang:
// reasoning_content; newer vLLM and Ollama: reasoning).
func decodeCompletion(raw []byte) (*Response, error) {
	var wc openai.ChatCompletion
	if err := json.Unmarshal(raw, &wc); err != nil {
		return nil, fmt.Errorf("response is not a chat completion: %v (body starts %q)", err, clip(string(raw), 80))
	}
	if len(wc.Choices) == 0 {
		return nil, errNoChoices
	}
	ch := &wc.Choices[0]
	r := &Response{
		Content:      ch.Message.Content.String(),
		Reasoning:    ch.Message.ReasoningContent,
		FinishReason: ch.FinishReason,
		StopReason:   ch.StopString(),
		Model:        wc.Model,
	}
	if r.Reasoning == "" {
		r.Reasoning = ch.Message.Reasoning
	}
	r.PromptTokenIDs, r.TokenIDs = wc.PromptTokenIDs, ch.TokenIDs
	for i, tc := range ch.Message.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			continue
		}
		id := tc.ID
		if id == "" {
			id = fmt.Sprintf("call_%d", i)
		}
		// Arguments sent as an object are kept as written, and a
		// raw value is the one text encoding/json does not make valid
		// UTF-8: it ends up in Parquet string columns.
		args := string(tc.Function.Arguments)
		if !utf8.ValidString(args) {
			args = string([]rune(args))
		}
		r.ToolCalls = append(r.ToolCalls, schemas.ToolCall{ID: id, Name: tc.Function.Name, Arguments: args})
	}
	if wc.Usage != nil {
		r.PromptTokens = wc.Usage.PromptTokens
		r.CompletionTokens = wc.Usage.CompletionTokens
	} else {
		r.UsageMissing = true
	}
	return r, nil
}

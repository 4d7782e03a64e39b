package models

import (
	"encoding/json"
	"fmt"

	"github.com/whalerun/whale/schemas"
)

// wireRequest is the chat completion body. It is encoded with
// encoding/json rather than through openai-go's typed params, which cost
// four times as much to encode (see BenchmarkChatVsBareHTTP in the tests).
// Pointers are omitted only when nil, so 0 and false are sent.
type wireRequest struct {
	Model       string        `json:"model"`
	Messages    []wireMessage `json:"messages"`
	Tools       []wireTool    `json:"tools,omitempty"`
	Temperature *float64      `json:"temperature,omitempty"`
	TopP        *float64      `json:"top_p,omitempty"`
	TopK        *int          `json:"top_k,omitempty"`
	MaxTokens   *int64        `json:"max_tokens,omitempty"` // every server reads this older name
	Seed        *int64        `json:"seed,omitempty"`
	Stop        []string      `json:"stop,omitempty"`
}

type wireMessage struct {
	Role string `json:"role"`
	// Content is omitted only on an assistant turn that just calls tools:
	// some chat templates choke on "" next to tool_calls.
	Content    *string        `json:"content,omitempty"`
	Name       string         `json:"name,omitempty"` // tool messages too: vLLM's and Ollama's templates use it
	ToolCallID string         `json:"tool_call_id,omitempty"`
	ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
}

type wireToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type wireTool struct {
	Type     string           `json:"type"`
	Function wireToolFunction `json:"function"`
}

type wireToolFunction struct {
	Name        string         `json:"name"`
	Description string         `json:"description,omitempty"`
	Parameters  map[string]any `json:"parameters,omitempty"`
}

// toWire maps whale messages to the wire. Roles are system, developer, user,
// assistant and tool; anything else is refused before a request is made.
func toWire(msgs []schemas.Message) ([]wireMessage, error) {
	out := make([]wireMessage, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		w := wireMessage{Role: m.Role, Name: m.Name, Content: &m.Content}
		switch m.Role {
		case "system", "developer", "user":
		case "assistant":
			if m.Content == "" && len(m.ToolCalls) > 0 {
				w.Content = nil
			}
			if len(m.ToolCalls) > 0 {
				w.ToolCalls = make([]wireToolCall, len(m.ToolCalls))
				for j, tc := range m.ToolCalls {
					w.ToolCalls[j] = wireToolCall{ID: tc.ID, Type: "function", Function: wireFunction{Name: tc.Name, Arguments: tc.Arguments}}
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

func toWireTools(tools []Tool) ([]wireTool, error) {
	if len(tools) == 0 {
		return nil, nil
	}
	out := make([]wireTool, len(tools))
	for i, t := range tools {
		if t.Name == "" {
			return nil, fmt.Errorf("tool %d: no name", i)
		}
		out[i] = wireTool{Type: "function", Function: wireToolFunction{Name: t.Name, Description: t.Description, Parameters: t.Parameters}}
	}
	return out, nil
}

// wireCompletion is the part of a chat.completion body that whale reads.
type wireCompletion struct {
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
			Reasoning        string `json:"reasoning"`
			ToolCalls        []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name string `json:"name"`
					// Arguments is a JSON-encoded string in OpenAI's schema;
					// some servers send the object itself.
					Arguments json.RawMessage `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
}

// decodeCompletion reads the first choice of a chat.completion body.
//
// A tool call without an id gets call_<index>, so that the harness can
// always answer it with a tool message; custom (non-function) calls are
// skipped: whale declares only function tools. The reasoning text is the
// one a server's reasoning parser split out (vLLM/SGLang:
// reasoning_content; newer vLLM and Ollama: reasoning).
func decodeCompletion(raw []byte) (*Response, error) {
	var wc wireCompletion
	if err := json.Unmarshal(raw, &wc); err != nil {
		return nil, fmt.Errorf("response is not a chat completion: %v (body starts %q)", err, clip(string(raw), 80))
	}
	if len(wc.Choices) == 0 {
		return nil, errNoChoices
	}
	ch := wc.Choices[0]
	r := &Response{
		Content:      ch.Message.Content,
		Reasoning:    ch.Message.ReasoningContent,
		FinishReason: ch.FinishReason,
		Model:        wc.Model,
	}
	if r.Reasoning == "" {
		r.Reasoning = ch.Message.Reasoning
	}
	for i, tc := range ch.Message.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			continue
		}
		id := tc.ID
		if id == "" {
			id = fmt.Sprintf("call_%d", i)
		}
		args := string(tc.Function.Arguments)
		var s string
		if json.Unmarshal(tc.Function.Arguments, &s) == nil {
			args = s
		} else if args == "null" {
			args = ""
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

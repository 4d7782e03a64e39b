package models

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	gojson "github.com/goccy/go-json"

	"github.com/whalerun/whale/schemas"
)

// wireRequest is the chat completion body, encoded with encoding/json.
// Pointers are omitted only when nil, so 0 and false are sent.
type wireRequest struct {
	Model       string        `json:"model"`
	Messages    []wireMessage `json:"messages"`
	Tools       []wireTool    `json:"tools,omitempty"`
	ToolChoice  any           `json:"tool_choice,omitempty"`
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
	// ReasoningContent and Reasoning give an earlier assistant turn's
	// reasoning back: inside a tool-call chain Qwen3's template renders it
	// (as reasoning_content), and the model must see at rollout what the
	// trainer renders. vLLM has read either key depending on its release,
	// so both are sent.
	ReasoningContent string `json:"reasoning_content,omitempty"`
	Reasoning        string `json:"reasoning,omitempty"`
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
			w.ReasoningContent, w.Reasoning = m.Reasoning, m.Reasoning
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
		// StopReason is vLLM's: the stop string (or token id) that ended
		// the reply, null otherwise.
		StopReason json.RawMessage `json:"stop_reason"`
		TokenIDs   []int32         `json:"token_ids"`
	} `json:"choices"`
	// PromptTokenIDs is vLLM's, with return_token_ids.
	PromptTokenIDs []int32 `json:"prompt_token_ids"`
	Usage          *struct {
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
//
// The body is decoded with goccy/go-json, a drop-in for encoding/json
// that takes about a third of the time on a typical reply (1.1 µs and 5
// allocations instead of 3-4.5 µs and 15 alone; 3-4 µs less per call in
// the rollout path against a zero-latency server, where the client's own
// cost competes with the episode loop's). FuzzDecodeCompletion checks
// that it reads any body as encoding/json does; it may accept a body that
// encoding/json rejects for a malformed value under a key whale does not
// read, never a truncated one.
func decodeCompletion(raw []byte) (*Response, error) {
	wc, err := unmarshalCompletion(raw)
	if err != nil {
		return nil, fmt.Errorf("response is not a chat completion: %v (body starts %q)", err, clip(string(raw), 80))
	}
	return fromWire(&wc)
}

// fromWire is decodeCompletion's reading of a decoded body.
func fromWire(wc *wireCompletion) (*Response, error) {
	if len(wc.Choices) == 0 {
		return nil, errNoChoices
	}
	ch := wc.Choices[0]
	// Text is made valid UTF-8 as encoding/json would (goccy/go-json
	// keeps invalid bytes): it ends up in Parquet string columns.
	r := &Response{
		Content:      validUTF8(ch.Message.Content),
		Reasoning:    validUTF8(ch.Message.ReasoningContent),
		FinishReason: validUTF8(ch.FinishReason),
		Model:        validUTF8(wc.Model),
	}
	if r.Reasoning == "" {
		r.Reasoning = validUTF8(ch.Message.Reasoning)
	}
	r.PromptTokenIDs, r.TokenIDs = wc.PromptTokenIDs, ch.TokenIDs
	var stop string
	if json.Unmarshal(ch.StopReason, &stop) == nil {
		r.StopReason = validUTF8(stop)
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
		r.ToolCalls = append(r.ToolCalls, schemas.ToolCall{ID: validUTF8(id), Name: validUTF8(tc.Function.Name), Arguments: validUTF8(args)})
	}
	if wc.Usage != nil {
		r.PromptTokens = wc.Usage.PromptTokens
		r.CompletionTokens = wc.Usage.CompletionTokens
	} else {
		r.UsageMissing = true
	}
	return r, nil
}

// validUTF8 replaces each byte of s that is not part of valid UTF-8 by
// U+FFFD, as encoding/json does when it decodes a string.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	b := make([]byte, 0, len(s)+8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = utf8.AppendRune(b, utf8.RuneError)
		} else {
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return string(b)
}

// unmarshalCompletion decodes raw with goccy/go-json. A panic in the
// decoder becomes an error: a malformed reply must fail its attempt, not
// the process.
func unmarshalCompletion(raw []byte) (wc wireCompletion, err error) {
	defer func() {
		if p := recover(); p != nil {
			wc, err = wireCompletion{}, fmt.Errorf("decoder failed: %v", p)
		}
	}()
	err = gojson.Unmarshal(raw, &wc)
	return wc, err
}

// appendRequest appends w's JSON encoding, byte for byte what
// encoding/json makes of it, with the messages taken from msgs (w.Messages
// is ignored): encoding them here, without reflection and without the
// intermediate []wireMessage, halved the cost of building a body. Anything
// this does not write itself (tools, floats that are not finite) goes to
// encoding/json.
func appendRequest(dst []byte, w *wireRequest, msgs []schemas.Message) ([]byte, error) {
	if !finite(w.Temperature) || !finite(w.TopP) {
		return nil, errNotFinite
	}
	dst = append(dst, `{"model":`...)
	dst = appendJSONString(dst, w.Model)
	dst = append(dst, `,"messages":[`...)
	for i := range msgs {
		if i > 0 {
			dst = append(dst, ',')
		}
		var err error
		if dst, err = appendMessage(dst, i, &msgs[i]); err != nil {
			return nil, err
		}
	}
	dst = append(dst, ']')
	if len(w.Tools) > 0 {
		tools, err := json.Marshal(w.Tools)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		dst = append(append(dst, `,"tools":`...), tools...)
	}
	if w.ToolChoice != nil {
		choice, err := json.Marshal(w.ToolChoice)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		dst = append(append(dst, `,"tool_choice":`...), choice...)
	}
	if w.Temperature != nil {
		dst = appendJSONFloat(append(dst, `,"temperature":`...), *w.Temperature)
	}
	if w.TopP != nil {
		dst = appendJSONFloat(append(dst, `,"top_p":`...), *w.TopP)
	}
	if w.TopK != nil {
		dst = strconv.AppendInt(append(dst, `,"top_k":`...), int64(*w.TopK), 10)
	}
	if w.MaxTokens != nil {
		dst = strconv.AppendInt(append(dst, `,"max_tokens":`...), *w.MaxTokens, 10)
	}
	if w.Seed != nil {
		dst = strconv.AppendInt(append(dst, `,"seed":`...), *w.Seed, 10)
	}
	if len(w.Stop) > 0 {
		dst = append(dst, `,"stop":[`...)
		for i, s := range w.Stop {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, s)
		}
		dst = append(dst, ']')
	}
	return append(dst, '}'), nil
}

var errNotFinite = errors.New("sampling parameter is not a finite number")

func finite(f *float64) bool { return f == nil || (!math.IsNaN(*f) && !math.IsInf(*f, 0)) }

// appendMessage is toWire and encoding/json for one message, with toWire's
// checks and errors (which are the caller's, returned as they are).
func appendMessage(dst []byte, i int, m *schemas.Message) ([]byte, error) {
	switch m.Role {
	case "system", "developer", "user", "assistant":
	case "tool":
		if m.ToolCallID == "" {
			return nil, fmt.Errorf("message %d: tool message without tool_call_id", i)
		}
	default:
		return nil, fmt.Errorf("message %d: unknown role %q", i, m.Role)
	}
	if m.Role != "assistant" && len(m.ToolCalls) > 0 {
		return nil, fmt.Errorf("message %d: role %s cannot carry tool calls", i, m.Role)
	}
	dst = append(dst, `{"role":`...)
	dst = appendJSONString(dst, m.Role)
	if !(m.Role == "assistant" && m.Content == "" && len(m.ToolCalls) > 0) {
		dst = append(dst, `,"content":`...)
		dst = appendJSONString(dst, m.Content)
	}
	if m.Name != "" {
		dst = append(dst, `,"name":`...)
		dst = appendJSONString(dst, m.Name)
	}
	if m.Role == "tool" {
		dst = append(dst, `,"tool_call_id":`...)
		dst = appendJSONString(dst, m.ToolCallID)
	}
	if len(m.ToolCalls) > 0 {
		dst = append(dst, `,"tool_calls":[`...)
		for j, tc := range m.ToolCalls {
			if j > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, `{"id":`...)
			dst = appendJSONString(dst, tc.ID)
			dst = append(dst, `,"type":"function","function":{"name":`...)
			dst = appendJSONString(dst, tc.Name)
			dst = append(dst, `,"arguments":`...)
			dst = appendJSONString(dst, tc.Arguments)
			dst = append(dst, "}}"...)
		}
		dst = append(dst, ']')
	}
	if m.Role == "assistant" && m.Reasoning != "" {
		dst = append(dst, `,"reasoning_content":`...)
		dst = appendJSONString(dst, m.Reasoning)
		dst = append(dst, `,"reasoning":`...)
		dst = appendJSONString(dst, m.Reasoning)
	}
	return append(dst, '}'), nil
}

// appendJSONFloat formats f as encoding/json does (f is finite).
func appendJSONFloat(dst []byte, f float64) []byte {
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// e-09 → e-9, as encoding/json writes it.
		if n := len(dst); n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

const hexDigits = "0123456789abcdef"

// appendJSONString quotes s as encoding/json does, HTML escaping included:
// <, > and & as \u003c, \u003e, \u0026; invalid UTF-8 as \ufffd; U+2028
// and U+2029 escaped.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// toolChoice is tool_choice on the wire: the modes as strings, a tool's
// name as OpenAI's named-function object; nil (not sent) when unset.
func toolChoice(s string) any {
	switch s {
	case "":
		return nil
	case "auto", "none", "required":
		return s
	}
	return map[string]any{"type": "function", "function": map[string]any{"name": s}}
}

// Package openai holds the wire types of OpenAI's chat completions API
// (POST /v1/chat/completions) as whale speaks it: the one copy that the
// client (package models) encodes requests with and decodes replies
// with, and that whale's servers (models/localserve, and the fake
// models/modeltest) decode requests with and encode replies with.
//
// The types follow what vLLM accepts and returns, not only OpenAI's
// published schema: top_k and seed are sampling fields, replies may carry
// reasoning_content or reasoning, stop_reason, token_ids and
// prompt_token_ids. Where servers differ in a field's shape the decoding
// type accepts each shape (Content, Arguments, Stop); encoding always
// writes the shape OpenAI documents. Encoding and decoding are
// encoding/json's.
package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ChatRequest is the body of a chat completion request. Pointers are
// omitted only when nil, so that 0 and false are sent.
type ChatRequest struct {
	Model    string    `json:"model"`
	Messages []Message `json:"messages"`
	// Tools is nil when "tools" is absent or null.
	Tools []Tool `json:"tools,omitempty"`
	// ToolChoice is "none", "auto", "required" or a named-function
	// object, as JSON (see ToolChoice).
	ToolChoice  json.RawMessage `json:"tool_choice,omitempty"`
	Temperature *float64        `json:"temperature,omitempty"`
	TopP        *float64        `json:"top_p,omitempty"`
	TopK        *int            `json:"top_k,omitempty"`
	// MaxTokens is the older name, which every server reads;
	// MaxCompletionTokens the newer one.
	MaxTokens           *int64 `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int64 `json:"max_completion_tokens,omitempty"`
	Seed                *int64 `json:"seed,omitempty"`
	Stop                Stop   `json:"stop,omitempty"`
	Stream              bool   `json:"stream,omitempty"`
	N                   *int   `json:"n,omitempty"`
}

// Message is one message of a request's conversation.
type Message struct {
	Role string `json:"role"`
	// Content is nil (omitted) only on an assistant turn that just calls
	// tools: some chat templates choke on "" next to tool_calls.
	Content *Content `json:"content,omitempty"`
	// Name is also set on tool messages: vLLM's and Ollama's templates
	// read it.
	Name       string     `json:"name,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	// ReasoningContent and Reasoning give an earlier assistant turn's
	// reasoning back. vLLM has read either key depending on its release.
	ReasoningContent string `json:"reasoning_content,omitempty"`
	Reasoning        string `json:"reasoning,omitempty"`
}

// Content is a message's text. It decodes from a string or from a list of
// content parts, of which only text parts are accepted (their texts
// joined); null leaves a *Content nil. It encodes as a string.
type Content string

// UnmarshalJSON implements json.Unmarshaler.
func (c *Content) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*c = Content(s)
		return nil
	}
	if string(b) == "null" {
		*c = ""
		return nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(b, &parts); err != nil {
		return errors.New("content: want a string or a list of text parts")
	}
	var sb strings.Builder
	for i, p := range parts {
		if p.Type != "text" {
			return fmt.Errorf("content: part %d has type %q; only text parts are read", i, p.Type)
		}
		sb.WriteString(p.Text)
	}
	*c = Content(sb.String())
	return nil
}

// String returns the text of c, "" for nil.
func (c *Content) String() string {
	if c == nil {
		return ""
	}
	return string(*c)
}

// ToolCall is one native tool call of an assistant message. ID is always
// encoded: OpenAI's and vLLM's request schemas require it (a reply
// without one decodes to "", and whale's client names such a call).
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall is the function a tool call calls.
type FunctionCall struct {
	Name      string    `json:"name"`
	Arguments Arguments `json:"arguments"`
}

// Arguments is a tool call's arguments as JSON text. OpenAI's schema sends
// it as a string holding the JSON; some servers send the object itself,
// which decodes to its text as written; null decodes to "". It encodes as
// a string.
type Arguments string

// UnmarshalJSON implements json.Unmarshaler.
func (a *Arguments) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*a = Arguments(s)
	case string(b) == "null":
		*a = ""
	default:
		*a = Arguments(b) // a copy: b belongs to the decoder
	}
	return nil
}

// Tool is one entry of a request's tools.
type Tool struct {
	// Type is "function"; empty when the request left it out.
	Type string `json:"type,omitempty"`
	// Function is nil when the request left it out.
	Function *Function `json:"function"`
}

// Function declares a function tool. Parameters is its arguments' JSON
// schema, as JSON text.
type Function struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// ToolChoice is tool_choice on the wire: the modes "auto", "none" and
// "required" as strings, any other name as OpenAI's named-function
// object; nil (not sent) for "".
func ToolChoice(s string) json.RawMessage {
	switch s {
	case "":
		return nil
	case "auto", "none", "required":
		return json.RawMessage(`"` + s + `"`)
	}
	b, _ := json.Marshal(map[string]any{"type": "function", "function": map[string]string{"name": s}})
	return b
}

// Stop is the request's stop sequences. It decodes from a string or a
// list of strings; it encodes as a list.
type Stop []string

// UnmarshalJSON implements json.Unmarshaler.
func (s *Stop) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		*s = nil
		return nil
	}
	var one string
	if json.Unmarshal(b, &one) == nil {
		*s = Stop{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("stop: want a string or a list of strings")
	}
	*s = many
	return nil
}

// ChatCompletion is the body of a chat completion reply
// ("object": "chat.completion").
type ChatCompletion struct {
	ID      string   `json:"id"`
	Object  string   `json:"object"`
	Created int64    `json:"created"`
	Model   string   `json:"model"`
	Choices []Choice `json:"choices"`
	// Usage is nil when the server sent none.
	Usage *Usage `json:"usage,omitempty"`
	// PromptTokenIDs is vLLM's, with return_token_ids.
	PromptTokenIDs []int32 `json:"prompt_token_ids,omitempty"`
}

// Choice is one choice of a reply.
type Choice struct {
	Index        int          `json:"index"`
	Message      ReplyMessage `json:"message"`
	FinishReason string       `json:"finish_reason"`
	// StopReason is vLLM's: the stop string (a JSON string) or stop token
	// id (a number) that ended the reply; null (nil) for any other end.
	StopReason json.RawMessage `json:"stop_reason"`
	// TokenIDs is vLLM's, with return_token_ids.
	TokenIDs []int32 `json:"token_ids,omitempty"`
	// Logprobs is left out when nil; vLLM sends null when none were
	// asked for.
	Logprobs json.RawMessage `json:"logprobs,omitempty"`
}

// StopString is the stop string that ended the reply, "" when none did
// or a token id did.
func (c *Choice) StopString() string {
	var s string
	if json.Unmarshal(c.StopReason, &s) != nil {
		return ""
	}
	return s
}

// StopReasonOf is s as a StopReason: nil for "".
func StopReasonOf(s string) json.RawMessage {
	if s == "" {
		return nil
	}
	b, _ := json.Marshal(s)
	return b
}

// ReplyMessage is the assistant message of a choice.
type ReplyMessage struct {
	Role string `json:"role"`
	// Content is null when the reply is only tool calls (vLLM's tool
	// parsers under tool_choice "auto").
	Content *Content `json:"content"`
	// ToolCalls is [] when there are none, as vLLM sends.
	ToolCalls []ToolCall `json:"tool_calls"`
	// The reasoning a server's reasoning parser split out: vLLM and
	// SGLang send reasoning_content, newer vLLM and Ollama reasoning.
	ReasoningContent string `json:"reasoning_content,omitempty"`
	Reasoning        string `json:"reasoning,omitempty"`
}

// Usage is a reply's token counts.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// ErrorResponse is OpenAI's error body, which vLLM also sends.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody is the error of an ErrorResponse.
type ErrorBody struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    int    `json:"code"`
}

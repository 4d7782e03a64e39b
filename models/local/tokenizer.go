package local

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/whalerun/whale/schemas"
)

// Special tokens follow the 256 byte tokens.
const (
	TokBOS       = 256 + iota // start of a conversation
	TokEOS                    // end of text
	TokSystem                 // header of a system message
	TokUser                   // header of a user message
	TokAssistant              // header of an assistant message
	TokTool                   // header of a tool result message
	TokEnd                    // end of any message
	// TokenizerVocab is the vocabulary size of the byte tokenizer.
	TokenizerVocab
)

// TokenizerVersion is recorded in checkpoints; a model trained under one
// template must not be served under another.
const TokenizerVersion = "bytes-v1"

var specialNames = [...]string{"<|bos|>", "<|eos|>", "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>", "<|end|>"}

// TokenName renders a token id for debugging: a special token's name, or
// the byte.
func TokenName(id int) string {
	switch {
	case id >= 0 && id < 256:
		return string(rune(id))
	case id >= TokBOS && id < TokenizerVocab:
		return specialNames[id-TokBOS]
	}
	return fmt.Sprintf("<|%d|>", id)
}

func roleToken(role string) (int, error) {
	switch role {
	case "system", "developer":
		return TokSystem, nil
	case "user":
		return TokUser, nil
	case "assistant":
		return TokAssistant, nil
	case "tool":
		return TokTool, nil
	}
	return 0, fmt.Errorf("unknown role %q", role)
}

// Markers of native tool use in the chat template. They are plain bytes,
// not special tokens: the byte vocabulary holds every character they need.
const (
	ToolsOpen     = "<tools>"
	ToolsClose    = "</tools>"
	ToolCallOpen  = "<tool_call>"
	ToolCallClose = "</tool_call>"
)

// Tool is a function tool as the chat template lists it.
type Tool struct {
	Name        string
	Description string
	// Parameters is the JSON schema of the arguments object; empty or null
	// for none.
	Parameters json.RawMessage
}

// ToolsText is the content of the system turn that lists tools, one JSON
// line per tool between <tools> and </tools> lines:
//
//	<tools>
//	{"name":"search","description":"…","parameters":{…}}
//	</tools>
//
// Keys come in that order; description and parameters are left out when
// empty. The parameters schema is re-encoded canonically (compact, object
// keys sorted, numbers as written, <, > and & escaped as \u003c…), so the
// same tools render the same bytes whether they came from a request body
// or from a Go map.
func ToolsText(tools []Tool) (string, error) {
	var b strings.Builder
	b.WriteString(ToolsOpen)
	for i, t := range tools {
		if t.Name == "" {
			return "", fmt.Errorf("tool %d: no name", i)
		}
		line := struct {
			Name        string          `json:"name"`
			Description string          `json:"description,omitempty"`
			Parameters  json.RawMessage `json:"parameters,omitempty"`
		}{Name: t.Name, Description: t.Description}
		if p := bytes.TrimSpace(t.Parameters); len(p) > 0 && string(p) != "null" {
			canon, err := canonicalJSON(p)
			if err != nil {
				return "", fmt.Errorf("tool %d (%s): parameters: %w", i, t.Name, err)
			}
			line.Parameters = canon
		}
		enc, err := json.Marshal(line)
		if err != nil {
			return "", fmt.Errorf("tool %d (%s): %w", i, t.Name, err)
		}
		b.WriteByte('\n')
		b.Write(enc)
	}
	b.WriteByte('\n')
	b.WriteString(ToolsClose)
	return b.String(), nil
}

// canonicalJSON re-encodes a JSON value with sorted object keys.
func canonicalJSON(raw []byte) (json.RawMessage, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, errors.New("trailing data after the JSON value")
	}
	return json.Marshal(v)
}

// ToolCallPrefix is how the template starts an assistant's call of the
// named tool, up to its arguments: <tool_call>{"name":"NAME","arguments":
func ToolCallPrefix(name string) string {
	n, _ := json.Marshal(name)
	return ToolCallOpen + `{"name":` + string(n) + `,"arguments":`
}

// messageText is the content the model reads or writes for a message.
// Native tool calls of an assistant message are appended as
// <tool_call>{"name":…,"arguments":…}</tool_call>, each on its own line
// after the content (no newline before the first when there is no
// content), so a byte model sees the same text a tag-based harness would
// parse. The call is encoding/json's compact form (keys name, arguments;
// <, > and & escaped, so the JSON never holds </tool_call>); arguments
// that are not JSON are written as a JSON string.
func messageText(m schemas.Message) string {
	if len(m.ToolCalls) == 0 {
		return m.Content
	}
	var b strings.Builder
	b.WriteString(m.Content)
	for _, tc := range m.ToolCalls {
		args := json.RawMessage(tc.Arguments)
		if !json.Valid(args) {
			args, _ = json.Marshal(tc.Arguments)
		}
		call, _ := json.Marshal(struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}{tc.Name, args})
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(ToolCallOpen)
		b.Write(call)
		b.WriteString(ToolCallClose)
	}
	return b.String()
}

// Encode renders a conversation with the chat template
//
//	<|bos|> (<|role|> content-bytes <|end|>)* [<|assistant|>]
//
// and returns the token ids and, per token, whether an assistant wrote it
// (the content bytes and closing <|end|> of assistant messages; not the
// header, which the template supplies). The trailing <|assistant|> is
// added when addGenerationPrompt is set. It is EncodeTools with no tools.
func Encode(msgs []schemas.Message, addGenerationPrompt bool) ([]int, []bool, error) {
	return EncodeTools(msgs, nil, addGenerationPrompt)
}

// EncodeTools is Encode for a conversation that offers tools: when there
// are any, a system turn holding ToolsText(tools) comes first, right after
// <|bos|>:
//
//	<|bos|> [<|system|> ToolsText <|end|>] (<|role|> content-bytes <|end|>)* [<|assistant|>]
//
// With no tools the rendering is Encode's, byte for byte.
func EncodeTools(msgs []schemas.Message, tools []Tool, addGenerationPrompt bool) ([]int, []bool, error) {
	ids := []int{TokBOS}
	mask := []bool{false}
	if len(tools) > 0 {
		text, err := ToolsText(tools)
		if err != nil {
			return nil, nil, fmt.Errorf("encode tools: %w", err)
		}
		ids = append(ids, TokSystem)
		ids = append(ids, EncodeText(text)...)
		ids = append(ids, TokEnd)
		mask = append(mask, make([]bool, len(text)+2)...)
	}
	for i, m := range msgs {
		rt, err := roleToken(m.Role)
		if err != nil {
			return nil, nil, fmt.Errorf("encode message %d: %w", i, err)
		}
		ids = append(ids, rt)
		mask = append(mask, false)
		own := rt == TokAssistant
		for _, b := range []byte(messageText(m)) {
			ids = append(ids, int(b))
			mask = append(mask, own)
		}
		ids = append(ids, TokEnd)
		mask = append(mask, own)
	}
	if addGenerationPrompt {
		ids = append(ids, TokAssistant)
		mask = append(mask, false)
	}
	return ids, mask, nil
}

// EncodeText is plain bytes, no special tokens.
func EncodeText(s string) []int {
	ids := make([]int, len(s))
	for i := 0; i < len(s); i++ {
		ids[i] = int(s[i])
	}
	return ids
}

// Decode turns generated ids into text: bytes up to the first <|end|> or
// <|eos|>; other special tokens are dropped. The second result says
// whether an end token was seen. Bytes are returned as generated, so the
// text may hold invalid UTF-8 from an undertrained model.
func Decode(ids []int) (string, bool) {
	var b strings.Builder
	for _, id := range ids {
		switch {
		case id >= 0 && id < 256:
			b.WriteByte(byte(id))
		case id == TokEnd || id == TokEOS:
			return b.String(), true
		}
	}
	return b.String(), false
}

func isStop(id int) bool { return id == TokEnd || id == TokEOS }

// ToolsFromJSON reads an OpenAI tools array (what the rollout stage keeps
// in a row's tools column) as the template's tools; "" is none.
func ToolsFromJSON(data string) ([]Tool, error) {
	if data == "" {
		return nil, nil
	}
	var wire []struct {
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	if err := json.Unmarshal([]byte(data), &wire); err != nil {
		return nil, fmt.Errorf("tools: not an OpenAI tools array: %w", err)
	}
	out := make([]Tool, len(wire))
	for i, w := range wire {
		if w.Function.Name == "" {
			return nil, fmt.Errorf("tools[%d]: no function name", i)
		}
		out[i] = Tool{Name: w.Function.Name, Description: w.Function.Description, Parameters: w.Function.Parameters}
	}
	return out, nil
}

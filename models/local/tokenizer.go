package local

import (
	"encoding/json"
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

// messageText is the content the model reads or writes for a message.
// Native tool calls of an assistant message are appended as
// <tool_call>{"name":…,"arguments":…}</tool_call> lines, so a byte model
// sees the same text a tag-based harness would parse.
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
		b.WriteString("<tool_call>")
		b.Write(call)
		b.WriteString("</tool_call>")
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
// added when addGenerationPrompt is set.
func Encode(msgs []schemas.Message, addGenerationPrompt bool) ([]int, []bool, error) {
	ids := []int{TokBOS}
	mask := []bool{false}
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

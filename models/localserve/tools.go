package localserve

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/whalerun/whale/models/local"
	"github.com/whalerun/whale/models/openai"
	"github.com/whalerun/whale/schemas"
)

// Tool choice modes, as vLLM names them.
const (
	choiceNone     = "none"
	choiceAuto     = "auto"
	choiceRequired = "required"
	choiceNamed    = "named" // {"type":"function","function":{"name":…}}
)

// toolSpec is what a request asks of native tools.
type toolSpec struct {
	tools  []local.Tool // rendered in the prompt; nil: none
	choice string       // one of the choice* modes
	name   string       // the tool of choiceNamed
}

// parse reports whether the reply is parsed for tool calls.
func (t toolSpec) parse() bool { return len(t.tools) > 0 && t.choice != choiceNone }

// prefill is the text the server writes at the start of the assistant
// turn, so that the model continues a call: "required" starts one,
// a named choice starts one of that tool up to its arguments. The byte
// model has no constrained decoding; this is its stand-in.
func (t toolSpec) prefill() string {
	if len(t.tools) == 0 {
		return ""
	}
	switch t.choice {
	case choiceRequired:
		return local.ToolCallOpen
	case choiceNamed:
		return local.ToolCallPrefix(t.name)
	}
	return ""
}

// parseToolSpec validates "tools" and "tool_choice" as vLLM's
// ChatCompletionRequest does: tools need a function with a name, a
// tool_choice other than "none" needs tools, a string choice is "none",
// "auto" or "required", an object choice names one of the tools, and
// "required" with an empty list of tools acts as "none". Without
// tool_choice the choice is "auto" when there are tools, else "none".
func parseToolSpec(rawTools []openai.Tool, toolsSet bool, rawChoice json.RawMessage) (toolSpec, error) {
	var spec toolSpec
	for i, t := range rawTools {
		if t.Type != "" && t.Type != "function" {
			return spec, fmt.Errorf("tools[%d].type %q: only \"function\" tools are supported", i, t.Type)
		}
		if t.Function == nil {
			return spec, fmt.Errorf("tools[%d]: field `function` is required", i)
		}
		if t.Function.Name == "" {
			return spec, fmt.Errorf("tools[%d].function.name is required", i)
		}
		p := bytes.TrimSpace(t.Function.Parameters)
		if len(p) > 0 && string(p) != "null" && p[0] != '{' {
			return spec, fmt.Errorf("tools[%d].function.parameters: want a JSON object", i)
		}
		spec.tools = append(spec.tools, local.Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: p})
	}
	rawChoice = bytes.TrimSpace(rawChoice)
	if len(rawChoice) == 0 || string(rawChoice) == "null" {
		spec.choice = choiceNone
		if len(spec.tools) > 0 {
			spec.choice = choiceAuto
		}
		return spec, nil
	}
	var s string
	if json.Unmarshal(rawChoice, &s) == nil {
		switch s {
		case choiceNone:
			spec.choice = s
			return spec, nil
		case choiceAuto, choiceRequired:
		default:
			return spec, fmt.Errorf("Invalid value for `tool_choice`: %s! Only named tools, \"none\", \"auto\" or \"required\" are supported.", s)
		}
		if !toolsSet {
			return spec, errors.New("When using `tool_choice`, `tools` must be set.")
		}
		spec.choice = s
		if s == choiceRequired && len(spec.tools) == 0 {
			spec.choice = choiceNone // OpenAI's behaviour, as vLLM follows it
		}
		return spec, nil
	}
	if rawChoice[0] != '{' {
		return spec, fmt.Errorf("Invalid value for `tool_choice`: %s! Only named tools, \"none\", \"auto\" or \"required\" are supported.", rawChoice)
	}
	if !toolsSet {
		return spec, errors.New("When using `tool_choice`, `tools` must be set.")
	}
	const usage = "Correct usage: `{\"type\": \"function\", \"function\": {\"name\": \"my_function\"}}`"
	var named struct {
		Type     *string         `json:"type"`
		Function json.RawMessage `json:"function"`
	}
	if err := json.Unmarshal(rawChoice, &named); err != nil {
		return spec, fmt.Errorf("Invalid value for `tool_choice`: %v. %s", err, usage)
	}
	if named.Type != nil && *named.Type != "function" {
		return spec, fmt.Errorf("Invalid `type` %q in `tool_choice`! %s", *named.Type, usage)
	}
	var fn map[string]json.RawMessage
	if f := bytes.TrimSpace(named.Function); len(f) == 0 || f[0] != '{' || json.Unmarshal(f, &fn) != nil {
		return spec, fmt.Errorf("Invalid value for `function`: `%s` in `tool_choice`! %s", named.Function, usage)
	}
	rawName, ok := fn["name"]
	if !ok {
		return spec, fmt.Errorf("Expected field `name` in `function` in `tool_choice`! %s", usage)
	}
	var name string
	if json.Unmarshal(rawName, &name) != nil || name == "" {
		return spec, fmt.Errorf("Invalid `name` in `function`: `%s` in `tool_choice`! %s", rawName, usage)
	}
	for _, t := range spec.tools {
		if t.Name == name {
			spec.choice, spec.name = choiceNamed, name
			return spec, nil
		}
	}
	return spec, errors.New("The tool specified in `tool_choice` does not match any of the specified `tools`")
}

// parseToolCalls reads tool calls out of an assistant's text the way
// vLLM's hermes parser does: every <tool_call>…</tool_call> block, and a
// last <tool_call> left open up to the end of the text, must hold a JSON
// object with a string "name" and an object "arguments" (whitespace
// around it is allowed, other keys are ignored); if any block fails, the
// text has no tool calls (ok false) and the caller returns it whole as
// content. content is the text before the first <tool_call>, less the
// one newline the template writes between content and a call, so that
// the reply renders back (local.Encode) to the text the model wrote when
// the model wrote the template's form. arguments is the compact JSON of
// the object as written.
func parseToolCalls(text string) (content string, calls []schemas.ToolCall, ok bool) {
	first := strings.Index(text, local.ToolCallOpen)
	if first < 0 {
		return text, nil, false
	}
	rest := text[first:]
	for len(rest) > 0 {
		i := strings.Index(rest, local.ToolCallOpen)
		if i < 0 {
			break // text after the last call: dropped, as vLLM drops it
		}
		rest = rest[i+len(local.ToolCallOpen):]
		body := rest
		if j := strings.Index(rest, local.ToolCallClose); j >= 0 {
			body, rest = rest[:j], rest[j+len(local.ToolCallClose):]
		} else {
			rest = ""
		}
		call, err := parseCall(body)
		if err != nil {
			return text, nil, false
		}
		calls = append(calls, call)
	}
	content = strings.TrimSuffix(text[:first], "\n")
	return content, calls, true
}

func parseCall(body string) (schemas.ToolCall, error) {
	var v struct {
		Name      *string         `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		return schemas.ToolCall{}, err
	}
	if v.Name == nil {
		return schemas.ToolCall{}, errors.New("no name")
	}
	args := bytes.TrimSpace(v.Arguments)
	if len(args) == 0 || args[0] != '{' {
		return schemas.ToolCall{}, errors.New("arguments is not an object")
	}
	var b bytes.Buffer
	if err := json.Compact(&b, args); err != nil {
		return schemas.ToolCall{}, err
	}
	return schemas.ToolCall{ID: newToolCallID(), Name: *v.Name, Arguments: b.String()}, nil
}

// newToolCallID is vLLM's default: chatcmpl-tool- and 32 random hex
// digits, unique across calls and server restarts.
func newToolCallID() string {
	var b [16]byte
	rand.Read(b[:])
	return "chatcmpl-tool-" + hex.EncodeToString(b[:])
}

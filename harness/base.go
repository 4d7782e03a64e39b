package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// MessageShape is one chat message as hooks build it: the dict form of
// schemas.Message.
var MessageShape = Record{
	Name: "message",
	Fields: []Field{
		{Name: "role", Shape: Enum{"system", "user", "assistant", "tool"}},
		{Name: "content", Shape: StringShape},
		{Name: "name", Shape: StringShape, Optional: true},
		{Name: "tool_call_id", Shape: StringShape, Optional: true},
		{Name: "reasoning", Shape: StringShape, Optional: true},
		{Name: "tool_calls", Shape: ListOf{Elem: Record{Fields: []Field{
			{Name: "id", Shape: StringShape, Optional: true},
			{Name: "name", Shape: StringShape},
			{Name: "arguments", Shape: StringShape},
		}}}, Optional: true},
	},
}

// MessagesShape is what build_messages returns.
var MessagesShape = ListOf{Elem: MessageShape, Min: 1, Max: 10_000}

// ActionShape is what parse_action returns: the model's reply, decided.
// Variants are open: a harness may add keys of its own (e.g. "raw").
var ActionShape = Tagged{
	Name: "action",
	Tag:  "kind",
	Variants: map[string]Shape{
		"answer": Record{Open: true, Fields: []Field{
			{Name: "kind", Shape: StringShape},
			{Name: "answer", Shape: StringShape},
			endField,
		}},
		"tool": Record{Open: true, Fields: []Field{
			{Name: "kind", Shape: StringShape},
			{Name: "tool", Shape: StringShape},
			{Name: "input", Shape: StringShape, Optional: true},
			{Name: "args", Shape: DictShape, Optional: true},
			{Name: "id", Shape: StringShape, Optional: true},
			endField,
		}},
		"move": Record{Open: true, Fields: []Field{
			{Name: "kind", Shape: StringShape},
			{Name: "move", Shape: StringShape},
			endField,
		}},
		"invalid": Record{Open: true, Fields: []Field{
			{Name: "kind", Shape: StringShape},
			{Name: "error", Shape: StringShape, Optional: true},
		}},
	},
}

// endField is where an action ends in the reply (see Action.End).
var endField = Field{Name: "end", Shape: IntShape, Optional: true}

// BoolOrNone is should_stop's result: Python code often falls off the end
// of a function, and None counts as False.
var BoolOrNone = OneOf{BoolShape, NoneShape}

const baseStateDoc = `The episode loop passes hooks a ` + "`state`" + ` dict with at least:

| key | type | meaning |
|---|---|---|
| ` + "`task`" + ` | dict | ` + "`{id, question, meta}`" + `: the task as the model may see it (never the reference answers) |
| ` + "`turn`" + ` | int | model calls made so far in this episode |
| ` + "`messages`" + ` | list of message | the transcript so far, without the system prompt: the first observation, every assistant reply, every tool result and feedback message, in order |
| ` + "`last_action`" + ` | action or None | what parse_action made of the latest reply |
| ` + "`retries`" + ` | dict | ` + "`{\"format\": n, \"illegal\": n}`" + `: retries used so far |

A message is ` + "`{role, content}`" + ` (role one of system, user, assistant, tool) with optional ` + "`name`, `tool_call_id`" + `, ` + "`reasoning`" + ` (the thinking the server returned apart from the content) and ` + "`tool_calls`" + ` (a list of ` + "`{id, name, arguments}`" + `).
Hooks receive copies: changing them changes nothing in the loop; return what you want used.`

// Base returns the contract every domain extends: the common constants and
// hooks of a harness (DESIGN §6) with Go defaults.
func Base() *Contract {
	return &Contract{
		Name: "base",
		Intro: "A harness is a Starlark module (a Python dialect). It may define the constants and hooks " +
			"below; whatever it leaves out takes the default shown. The episode loop, the environment's " +
			"transitions and the verifier are not the harness's business: it decides what the model sees " +
			"and how its replies are read.",
		StateDoc: baseStateDoc,
		Constants: []ConstSpec{
			{
				Name:    "SYSTEM_PROMPT",
				Type:    TypeString,
				Default: "You are a careful problem solver. Think step by step, then give your final answer inside <answer></answer> tags.",
				Doc:     "The system message of every model call. Empty: no system message.",
			},
			{
				Name:    "USER_PROMPT",
				Type:    TypeTemplate,
				Default: "{question}",
				Fields:  []string{"question"},
				Doc:     "Template of the first user message, rendered by the default format_observation with Python str.format semantics (`{field}`; write `{{` and `}}` for literal braces).",
			},
			{
				Name: "MAX_TURNS", Type: TypeInt, Default: 4, Min: Bound(1), Max: Bound(64),
				Doc: "Most model calls in one episode; the episode ends without an answer after that.",
			},
			{
				Name: "FORMAT_RETRIES", Type: TypeInt, Default: 2, Min: Bound(0), Max: Bound(16),
				Doc: "How many replies parse_action may reject (kind \"invalid\") before the episode fails. Each retry costs a turn.",
			},
			{
				Name: "ILLEGAL_RETRIES", Type: TypeInt, Default: 0, Min: Bound(0), Max: Bound(16),
				Doc: "How many parsed actions the environment may reject (an illegal move, an unknown tool) before the episode fails.",
			},
			{
				Name: "MAX_TOKENS", Type: TypeInt, Default: 8192, Min: Bound(16), Max: Bound(131072),
				Doc: "Completion-token budget of each model call.",
			},
			{
				Name: "MAX_TOOL_RESULT_CHARS", Type: TypeInt, Default: 32768, Min: Bound(256), Max: Bound(1 << 20),
				Doc: "Most characters of the text answering an action (what format_tool_result or on_error returned); " +
					"longer text is cut to that many characters and followed by a one-line note saying how much was " +
					"cut, so that one huge result cannot overflow the model's context.",
			},
			{
				Name: "TOOLS", Type: TypeList, Default: []any{}, Shape: ListOf{Elem: ToolShape, Max: 32},
				Doc: "The native function tools offered to the model on every call (OpenAI `tools`; vLLM parses the " +
					"model's calls with its tool parser). Each entry is the name of a tool the domain offers (see " +
					"Tools below), or a dict `{name, description?, parameters?}` that replaces the tool's description " +
					"or its JSON-schema parameters. The loop runs every call of a reply and answers each with a `tool` " +
					"message (format_tool_result, or on_error(\"tool\", ...) when the arguments are not JSON, do not " +
					"match the parameters, or name a tool not offered). Empty: no native tools; parse_action may still " +
					"ask for tools with tags.",
			},
			{
				Name: "TOOL_CHOICE", Type: TypeString, Default: "",
				Doc: "OpenAI `tool_choice` sent with TOOLS: `auto`, `none`, `required`, or the name of the one tool " +
					"the model must call. Empty: not sent (the server's default, auto).",
			},
			{
				Name: "STOP", Type: TypeList, Default: []any{}, Shape: ListOf{Elem: NonEmptyStringShape, Max: 16},
				Doc: "Stop sequences sent with every call, after the experiment's `model.stop`. A server that stops " +
					"at one leaves it out of the reply (vLLM reports it as stop_reason); the loop puts it back, so " +
					"that parse_action sees the closing tag the model wrote.",
			},
		},
		Hooks: []HookSpec{
			{
				Name: "format_observation", Params: []string{"obs"}, Returns: StringShape,
				Doc:        "Turn an observation of the environment (a dict of the domain's fields, e.g. `question`) into the text of a user message.",
				Default:    defaultFormatObservation,
				DefaultDoc: "`USER_PROMPT.format(**obs)`; a string observation is used as is.",
			},
			{
				Name: "build_messages", Params: []string{"state"}, Returns: MessagesShape,
				Doc:        "Context management: the list of messages sent to the model for the next call.",
				Default:    defaultBuildMessages,
				DefaultDoc: "The system message (SYSTEM_PROMPT, unless empty) followed by the whole transcript `state[\"messages\"]`.",
			},
			{
				Name: "parse_action", Params: []string{"text", "state"}, Returns: ActionShape,
				Doc: "Decide what the model's reply means. Return a dict with `kind` one of:\n\n" + ActionShape.Detail() +
					"\n\nAn action may carry `end`, the byte offset in `text` where the action ends (`m.end()` of the " +
					"match that found it): the loop keeps `text[:end]` as the assistant message, so what the model " +
					"wrote after its action (an invented `<information>` block, a second answer) is neither stored nor " +
					"trained on; the whole reply stays in the trace. Without `end` the whole reply is kept. A reply " +
					"with native tool calls is not passed to parse_action: its calls are the action.",
				Default:    defaultParseAction,
				DefaultDoc: "The text of the last `<answer>…</answer>` is the answer, and the reply ends at its `</answer>`; otherwise the reply is invalid.",
			},
			{
				Name: "format_tool_result", Params: []string{"result", "state"}, Returns: StringShape,
				Doc:        "Turn the result of a tool call made by the loop (a dict of the domain's fields) into the text the model sees.",
				Default:    defaultFormatToolResult,
				DefaultDoc: "A string result as is, a dict's `text` if it has one, otherwise the result as JSON.",
			},
			{
				Name: "on_error", Params: []string{"kind", "detail", "state"}, Returns: StringShape,
				Doc: "Feedback text sent to the model after a failed turn. `kind` is `\"format\"` (parse_action said invalid), " +
					"`\"illegal\"` (the environment rejected the action), `\"tool\"` (a tool call failed) or `\"length\"` " +
					"(the reply hit MAX_TOKENS); `detail` says what went wrong.",
				Default:    defaultOnError,
				DefaultDoc: "A one-line note naming the problem and asking for a reply in the required format.",
			},
			{
				Name: "should_stop", Params: []string{"state"}, Returns: BoolOrNone,
				Doc:        "Called before each model call; True ends the episode early (without an answer unless one was given). None counts as False.",
				Default:    defaultShouldStop,
				DefaultDoc: "Never stops early; MAX_TURNS and the retry budgets still apply.",
			},
		},
	}
}

func defaultFormatObservation(_ context.Context, h *Harness, args []any) (any, error) {
	switch obs := args[0].(type) {
	case string:
		return obs, nil
	case map[string]any:
		return h.Render("USER_PROMPT", obs)
	}
	return nil, fmt.Errorf("obs is %s, want a dict or a string", describe(args[0]))
}

func defaultBuildMessages(_ context.Context, h *Harness, args []any) (any, error) {
	state, ok := args[0].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("state is %s, want a dict", describe(args[0]))
	}
	transcript, ok := state["messages"].([]any)
	if !ok {
		return nil, fmt.Errorf("state[\"messages\"] is %s, want a list", describe(state["messages"]))
	}
	out := make([]any, 0, len(transcript)+1)
	if sys, _ := h.consts["SYSTEM_PROMPT"].(string); sys != "" { // a contract without Base's constants has none
		out = append(out, map[string]any{"role": "system", "content": sys})
	}
	return append(out, transcript...), nil
}

var answerTagRE = regexp.MustCompile(`(?is)<answer>(.*?)</answer>`)

func defaultParseAction(_ context.Context, _ *Harness, args []any) (any, error) {
	text, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("text is %s, want a string", describe(args[0]))
	}
	all := answerTagRE.FindAllStringSubmatchIndex(text, -1)
	if len(all) == 0 {
		return map[string]any{"kind": "invalid", "error": "no <answer>...</answer> in the reply"}, nil
	}
	m := all[len(all)-1]
	return map[string]any{"kind": "answer", "answer": strings.TrimSpace(text[m[2]:m[3]]), "end": int64(m[1])}, nil
}

func defaultFormatToolResult(_ context.Context, _ *Harness, args []any) (any, error) {
	switch r := args[0].(type) {
	case string:
		return r, nil
	case map[string]any:
		if t, ok := r["text"].(string); ok {
			return t, nil
		}
	}
	data, err := json.Marshal(args[0])
	if err != nil {
		return nil, fmt.Errorf("tool result as JSON: %w", err)
	}
	return string(data), nil
}

func defaultOnError(_ context.Context, _ *Harness, args []any) (any, error) {
	kind, _ := args[0].(string)
	detail, _ := args[1].(string)
	var what string
	switch kind {
	case "format":
		what = "Your reply could not be understood"
	case "illegal":
		what = "That action is not allowed"
	case "tool":
		what = "The tool call failed"
	case "length":
		what = "Your reply was cut off because it was too long"
	default:
		what = "Something went wrong (" + kind + ")"
	}
	if detail != "" {
		what += ": " + detail
	}
	return what + ". Please reply again, following the required format.", nil
}

func defaultShouldStop(context.Context, *Harness, []any) (any, error) { return false, nil }

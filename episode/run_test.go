package episode

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/models/modeltest"
	"github.com/whalerun/whale/schemas"
)

// taggedSrc reads <search>, <move> and <answer> tags; its retry budgets are
// overridden per case by prepending constants.
const taggedSrc = `
_SEARCH = re.compile(r"<search>(.*?)</search>")
_MOVE = re.compile(r"<move>(.*?)</move>")

def parse_action(text, state):
    m = re.search(r"<answer>(.*?)</answer>", text)
    if m:
        return {"kind": "answer", "answer": m.group(1).strip()}
    m = _SEARCH.search(text)
    if m:
        return {"kind": "tool", "tool": "search", "input": m.group(1)}
    m = _MOVE.search(text)
    if m:
        return {"kind": "move", "move": m.group(1)}
    return {"kind": "invalid", "error": "no tag"}
`

// nativeSrc offers search as a native tool.
const nativeSrc = "TOOLS = [\"search\"]\n"

// firstTagSrc takes the first closed <search> or <answer> as the action, as
// Search-R1 does, and says where it ends.
const firstTagSrc = `
def parse_action(text, state):
    m = re.search(r"<(search|answer)>(.*?)</(search|answer)>", text)
    if not m or m.group(1) != m.group(3):
        return {"kind": "invalid", "error": "no tag"}
    if m.group(1) == "answer":
        return {"kind": "answer", "answer": m.group(2).strip(), "end": m.end()}
    return {"kind": "tool", "tool": "search", "input": m.group(2).strip(), "end": m.end()}
`

// hookErrSrc fails at run time on line 4 (the division).
const hookErrSrc = `MAX_TURNS = 3

def parse_action(text, state):
    return {"kind": "answer", "answer": str(1 // (len(text) - len(text)))}
`

// contextSrc keeps only the first and the last message after its own
// system prompt: a context that differs from the default from turn 2 on.
const contextSrc = `SYSTEM_PROMPT = "sys"
FORMAT_RETRIES = 3

def build_messages(state):
    msgs = state["messages"]
    out = [{"role": "system", "content": "custom " + SYSTEM_PROMPT}]
    if len(msgs) > 1:
        return out + [msgs[0], msgs[-1]]
    return out + msgs
`

// stateSrc answers with what the state says, to check what hooks see.
const stateSrc = `FORMAT_RETRIES = 2

def parse_action(text, state):
    if "<answer>" not in text:
        return {"kind": "invalid", "error": "turn %d" % state["turn"]}
    meta = state["task"]["meta"]
    last = state["last_action"]
    return {"kind": "answer", "answer": "%s|%d|%s|%d|%d|%s|%s" % (
        state["task"]["id"], meta["rating"], type(meta["rating"]), state["turn"],
        state["retries"]["format"], last["error"] if last else None, len(state["messages"]))}
`

func TestRunFakeEnv(t *testing.T) {
	answer := modeltest.Reply{Content: "Thinking... <answer>42</answer>", PromptTokens: 10, CompletionTokens: 5}
	search := func(q string) modeltest.Reply { return modeltest.Reply{Content: "<search>" + q + "</search>"} }
	nativeCall := func(id, args string) modeltest.Reply {
		return modeltest.Reply{ToolCalls: []modeltest.ToolCall{{ID: id, Name: "search", Arguments: args}}}
	}

	type want struct {
		finish  string
		answer  string
		reward  float64
		turns   int
		errText string // Error must contain it; empty: Error must be empty
	}
	cases := []struct {
		name    string
		src     string
		task    schemas.Task
		cfg     Config
		replies []modeltest.Reply
		want    want
		check   func(t *testing.T, res Result, reqs []modeltest.Request)
	}{
		{
			name: "answer on the first turn", src: "",
			replies: []modeltest.Reply{answer},
			cfg:     Config{Seed: 100},
			want:    want{finish: FinishAnswer, answer: "42", reward: 1, turns: 1},
			check: func(t *testing.T, res Result, reqs []modeltest.Request) {
				if got := roles(res.Messages); got != "system,user,assistant" {
					t.Errorf("roles %s", got)
				}
				if res.Messages[2].Content != answer.Content {
					t.Errorf("reply not verbatim: %q", res.Messages[2].Content)
				}
				if res.PromptTokens != 10 || res.CompletionTokens != 5 || res.ModelID != "fake-model" {
					t.Errorf("tokens %d/%d model %q", res.PromptTokens, res.CompletionTokens, res.ModelID)
				}
				b := reqs[0].Body
				if b["seed"] != 100.0 || b["max_tokens"] != 8192.0 {
					t.Errorf("seed %v max_tokens %v", b["seed"], b["max_tokens"])
				}
				if _, ok := b["tools"]; ok {
					t.Errorf("tag-based episode sent tools")
				}
				if len(eventsOf(res.Trace, KindContext)) != 0 {
					t.Errorf("default context traced: %v", eventsOf(res.Trace, KindContext))
				}
				m := eventsOf(res.Trace, KindModel)
				if len(m) != 1 || !strings.Contains(m[0].Action, "finish=stop prompt=10 completion=5 attempts=1") || m[0].Turn != 1 {
					t.Errorf("model events %+v", m)
				}
				wantKinds := []string{"env", "hook", "hook", "hook", "model", "hook", "env"}
				if got := kinds(res.Trace); !slices.Equal(got, wantKinds) {
					t.Errorf("trace kinds %v, want %v", got, wantKinds)
				}
				if res.Latency <= 0 {
					t.Errorf("latency %v", res.Latency)
				}
			},
		},
		{
			name: "format retry then success", src: "",
			replies: []modeltest.Reply{{Content: "I think it is 42."}, answer},
			cfg:     Config{Seed: 7, Sampling: models.Sampling{MaxTokens: models.Ptr[int64](64)}},
			want:    want{finish: FinishAnswer, answer: "42", reward: 1, turns: 2},
			check: func(t *testing.T, res Result, reqs []modeltest.Request) {
				msgs := reqs[1].Messages
				if got := roles(msgs); got != "system,user,assistant,user" {
					t.Fatalf("second call roles %s", got)
				}
				if !strings.Contains(msgs[3].Content, "could not be understood") || !strings.Contains(msgs[3].Content, "no <answer>") {
					t.Errorf("feedback %q", msgs[3].Content)
				}
				if reqs[1].Body["seed"] != 8.0 || reqs[1].Body["max_tokens"] != 64.0 {
					t.Errorf("second call seed %v max_tokens %v", reqs[1].Body["seed"], reqs[1].Body["max_tokens"])
				}
			},
		},
		{
			name: "length cut uses on_error length", src: "",
			replies: []modeltest.Reply{{Content: "Let me think at great len", FinishReason: "length"}, answer},
			want:    want{finish: FinishAnswer, answer: "42", reward: 1, turns: 2},
			check: func(t *testing.T, res Result, reqs []modeltest.Request) {
				if fb := reqs[1].Messages[3].Content; !strings.Contains(fb, "cut off") {
					t.Errorf("feedback %q", fb)
				}
			},
		},
		{
			name: "format retries exhausted", src: "FORMAT_RETRIES = 1\nMAX_TURNS = 8\n",
			replies: []modeltest.Reply{{Content: "no idea"}},
			want:    want{finish: FinishFormat, answer: "final after 0 steps", reward: 0.25, turns: 2},
		},
		{
			name: "illegal then legal", src: "ILLEGAL_RETRIES = 1\n" + taggedSrc,
			replies: []modeltest.Reply{{Content: "<move>e9e9</move>"}, {Content: "<move>win</move>"}},
			want:    want{finish: FinishAnswer, answer: "win", reward: 1, turns: 2},
			check: func(t *testing.T, res Result, reqs []modeltest.Request) {
				if fb := reqs[1].Messages[3].Content; !strings.Contains(fb, "not allowed: illegal move e9e9") {
					t.Errorf("feedback %q", fb)
				}
				env := eventsOf(res.Trace, KindEnv)
				if len(env) != 3 || env[1].Action != `move "e9e9"` || env[1].Feedback != "illegal: illegal move e9e9" || !strings.HasPrefix(env[2].Feedback, "done: reward=1") {
					t.Errorf("env events %+v", env)
				}
			},
		},
		{
			name: "illegal retries exhausted", src: taggedSrc,
			replies: []modeltest.Reply{{Content: "<move>e9e9</move>"}},
			want:    want{finish: FinishIllegal, answer: "final after 1 steps", reward: 0.25, turns: 1},
		},
		{
			name: "move observation then answer", src: taggedSrc,
			replies: []modeltest.Reply{{Content: "<move>e2e4</move>"}, answer},
			want:    want{finish: FinishAnswer, answer: "42", reward: 1, turns: 2},
			check: func(t *testing.T, res Result, reqs []modeltest.Request) {
				if got := reqs[1].Messages[3]; got.Role != "user" || got.Content != "Black played e7e5. Your move." {
					t.Errorf("observation message %+v", got)
				}
			},
		},
		{
			name: "tag-based tool call", src: taggedSrc,
			replies: []modeltest.Reply{search("blue whale"), answer},
			want:    want{finish: FinishAnswer, answer: "42", reward: 1, turns: 2},
			check: func(t *testing.T, res Result, reqs []modeltest.Request) {
				if got := reqs[1].Messages[3]; got.Role != "user" || got.Content != "result for blue whale" {
					t.Errorf("tool result message %+v", got)
				}
				tools := eventsOf(res.Trace, KindTool)
				if len(tools) != 1 || tools[0].Action != `search("blue whale")` || tools[0].Feedback != `result: {"text": "result for blue whale"}` || tools[0].Turn != 1 {
					t.Errorf("tool events %+v", tools)
				}
			},
		},
		{
			name: "tag-based tool error is fed back", src: taggedSrc,
			replies: []modeltest.Reply{search("boom"), answer},
			want:    want{finish: FinishAnswer, answer: "42", reward: 1, turns: 2},
			check: func(t *testing.T, res Result, reqs []modeltest.Request) {
				if got := reqs[1].Messages[3]; got.Role != "user" || !strings.Contains(got.Content, "tool call failed: retriever down") {
					t.Errorf("tool error message %+v", got)
				}
			},
		},
		{
			name: "unknown tool is illegal", src: "ILLEGAL_RETRIES = 1\n" + strings.Replace(taggedSrc, `"tool": "search"`, `"tool": "grep"`, 1),
			replies: []modeltest.Reply{search("x"), answer},
			want:    want{finish: FinishAnswer, answer: "42", reward: 1, turns: 2},
			check: func(t *testing.T, res Result, reqs []modeltest.Request) {
				if got := reqs[1].Messages[3].Content; !strings.Contains(got, "unknown tool grep") {
					t.Errorf("feedback %q", got)
				}
			},
		},
		{
			name: "native tool call", src: nativeSrc,
			replies: []modeltest.Reply{nativeCall("call_7", `{"query": "blue whale"}`), answer},
			want:    want{finish: FinishAnswer, answer: "42", reward: 1, turns: 2},
			check: func(t *testing.T, res Result, reqs []modeltest.Request) {
				if len(reqs[0].Tools) != 1 || reqs[0].Tools[0].Name != "search" {
					t.Errorf("tools sent %+v", reqs[0].Tools)
				}
				msgs := reqs[1].Messages
				if got := roles(msgs); got != "system,user,assistant,tool" {
					t.Fatalf("roles %s", got)
				}
				if tc := msgs[2].ToolCalls; len(tc) != 1 || tc[0].ID != "call_7" || tc[0].Arguments != `{"query": "blue whale"}` {
					t.Errorf("assistant tool calls %+v", tc)
				}
				if m := msgs[3]; m.ToolCallID != "call_7" || m.Content != "result for blue whale" || m.Name != "search" {
					t.Errorf("tool message %+v", m)
				}
				tools := eventsOf(res.Trace, KindTool)
				if len(tools) != 1 || tools[0].Action != `search("blue whale") id=call_7` {
					t.Errorf("tool events %+v", tools)
				}
			},
		},
		{
			name: "native tool error and bad arguments answer their calls", src: nativeSrc,
			replies: []modeltest.Reply{
				{ToolCalls: []modeltest.ToolCall{{ID: "a", Name: "search", Arguments: `{"query": "boom"}`}, {ID: "b", Name: "search", Arguments: `not json`}}},
				answer,
			},
			want: want{finish: FinishAnswer, answer: "42", reward: 1, turns: 2},
			check: func(t *testing.T, res Result, reqs []modeltest.Request) {
				msgs := reqs[1].Messages
				if got := roles(msgs); got != "system,user,assistant,tool,tool" {
					t.Fatalf("roles %s", got)
				}
				if m := msgs[3]; m.ToolCallID != "a" || !strings.Contains(m.Content, "retriever down") {
					t.Errorf("tool error message %+v", m)
				}
				if m := msgs[4]; m.ToolCallID != "b" || !strings.Contains(m.Content, "not a JSON object") {
					t.Errorf("bad arguments message %+v", m)
				}
			},
		},
		{
			name: "unknown tool and arguments off the schema are tool errors", src: nativeSrc + "FORMAT_RETRIES = 0\n",
			replies: []modeltest.Reply{
				{ToolCalls: []modeltest.ToolCall{{ID: "a", Name: "grep", Arguments: `{"query": "x"}`}, {ID: "b", Name: "search", Arguments: `{"query": 7}`}, {ID: "c", Name: "search", Arguments: `{}`}}},
				answer,
			},
			want: want{finish: FinishAnswer, answer: "42", reward: 1, turns: 2},
			check: func(t *testing.T, res Result, reqs []modeltest.Request) {
				msgs := reqs[1].Messages
				if got := roles(msgs); got != "system,user,assistant,tool,tool,tool" {
					t.Fatalf("roles %s", got)
				}
				wants := []string{`The tool call failed: there is no tool "grep": the tools are search`, "/query: got number, want string", "missing property 'query'"}
				for i, w := range wants {
					if m := msgs[3+i]; m.ToolCallID != string(rune('a'+i)) || !strings.Contains(m.Content, w) {
						t.Errorf("tool message %d %+v, want it to contain %q", i, m, w)
					}
				}
				tools := eventsOf(res.Trace, KindTool)
				if len(tools) != 3 || !strings.HasPrefix(tools[0].Action, `grep("{\"query\": \"x\"}") id=a`) || !strings.HasPrefix(tools[1].Feedback, "tool error: ") {
					t.Errorf("tool events %+v", tools)
				}
			},
		},
		{
			name: "tools, tool choice and stop sequences are sent", src: nativeSrc + "TOOL_CHOICE = \"required\"\nSTOP = [\"</search>\", \"</answer>\"]\n",
			cfg:     Config{Sampling: models.Sampling{Stop: []string{"</answer>", "\n\nUser:"}}},
			replies: []modeltest.Reply{answer},
			want:    want{finish: FinishAnswer, answer: "42", reward: 1, turns: 1},
			check: func(t *testing.T, res Result, reqs []modeltest.Request) {
				b := reqs[0].Body
				if b["tool_choice"] != "required" {
					t.Errorf("tool_choice %v", b["tool_choice"])
				}
				if got, _ := json.Marshal(b["stop"]); string(got) != `["\u003c/answer\u003e","\n\nUser:","\u003c/search\u003e"]` {
					t.Errorf("stop %s", got)
				}
				tools, _ := json.Marshal(b["tools"])
				if !strings.Contains(string(tools), `"maxLength":100`) || !strings.Contains(string(tools), `"description":"Search the corpus."`) {
					t.Errorf("tools %s", tools)
				}
			},
		},
		{
			name: "a reply is cut at the end of its action", src: firstTagSrc,
			replies: []modeltest.Reply{{Content: "I will look. <search>q</search><information>fake</information><answer>x</answer>"}, answer},
			want:    want{finish: FinishAnswer, answer: "42", reward: 1, turns: 2},
			check: func(t *testing.T, res Result, reqs []modeltest.Request) {
				if got := res.Messages[2].Content; got != "I will look. <search>q</search>" {
					t.Errorf("stored assistant message %q", got)
				}
				if got := reqs[1].Messages[2].Content; got != "I will look. <search>q</search>" {
					t.Errorf("assistant message sent back %q", got)
				}
				if got := reqs[1].Messages[3].Content; got != "result for q" {
					t.Errorf("observation %q", got)
				}
				for _, m := range res.Messages {
					if strings.Contains(m.Content, "fake") {
						t.Errorf("invented observation kept in %+v", m)
					}
				}
				cuts := eventsOf(res.Trace, KindCut)
				if len(cuts) != 1 || cuts[0].Feedback != "<information>fake</information><answer>x</answer>" || cuts[0].Action != "kept 31 of 80 bytes" {
					t.Errorf("cut events %+v", cuts)
				}
				if m := eventsOf(res.Trace, KindModel); !strings.Contains(m[0].Feedback, "fake") {
					t.Errorf("raw reply not in the trace: %+v", m[0])
				}
			},
		},
		{
			name: "a stop sequence the server left out is put back", src: firstTagSrc + "STOP = [\"</search>\"]\n",
			replies: []modeltest.Reply{{Content: "<search>q", StopReason: "</search>"}, {Content: "<answer>42", StopReason: "</answer>"}},
			want:    want{finish: FinishFormat, answer: "final after 1 steps", reward: 0.25, turns: 4},
			check: func(t *testing.T, res Result, reqs []modeltest.Request) {
				if got := res.Messages[2].Content; got != "<search>q</search>" {
					t.Errorf("first reply %q", got)
				}
				// </answer> is not a stop sequence of this episode: the
				// reply stays as the server sent it.
				if got := res.Messages[4].Content; got != "<answer>42" {
					t.Errorf("second reply %q", got)
				}
			},
		},
		{
			name: "a stop sequence is not put back on a reply of tool calls", src: nativeSrc + "STOP = [\"</tool_call>\"]\n",
			replies: []modeltest.Reply{
				{Content: "Let me look.", StopReason: "</tool_call>", ToolCalls: []modeltest.ToolCall{{ID: "c1", Name: "search", Arguments: `{"query": "q"}`}}},
				answer,
			},
			want: want{finish: FinishAnswer, answer: "42", reward: 1, turns: 2},
			check: func(t *testing.T, res Result, _ []modeltest.Request) {
				if got := res.Messages[2].Content; got != "Let me look." {
					t.Errorf("content %q", got)
				}
			},
		},
		{
			name: "exact token ids are kept while each prompt extends the last", src: nativeSrc,
			replies: []modeltest.Reply{
				{PromptTokenIDs: []int{1, 2, 3}, TokenIDs: []int{4, 5}, ToolCalls: []modeltest.ToolCall{{ID: "c1", Name: "search", Arguments: `{"query": "q"}`}}},
				{PromptTokenIDs: []int{1, 2, 3, 4, 5, 6, 7}, TokenIDs: []int{8, 9}, Content: "<answer>42</answer>"},
			},
			want: want{finish: FinishAnswer, answer: "42", reward: 1, turns: 2},
			check: func(t *testing.T, res Result, _ []modeltest.Request) {
				a1, a2 := res.Messages[2], res.Messages[4]
				if !slices.Equal(a1.PromptTokenIDs, []int32{1, 2, 3}) || !slices.Equal(a1.TokenIDs, []int32{4, 5}) ||
					!slices.Equal(a2.PromptTokenIDs, []int32{6, 7}) || !slices.Equal(a2.TokenIDs, []int32{8, 9}) {
					t.Errorf("ids %v %v / %v %v", a1.PromptTokenIDs, a1.TokenIDs, a2.PromptTokenIDs, a2.TokenIDs)
				}
			},
		},
		{
			name: "token ids are dropped when a prompt does not extend the last", src: nativeSrc,
			replies: []modeltest.Reply{
				{PromptTokenIDs: []int{1, 2, 3}, TokenIDs: []int{4, 5}, ToolCalls: []modeltest.ToolCall{{ID: "c1", Name: "search", Arguments: `{"query": "q"}`}}},
				{PromptTokenIDs: []int{1, 2, 3, 4, 99, 6, 7}, TokenIDs: []int{8, 9}, Content: "<answer>42</answer>"},
			},
			want: want{finish: FinishAnswer, answer: "42", reward: 1, turns: 2},
			check: func(t *testing.T, res Result, _ []modeltest.Request) {
				for i, m := range res.Messages {
					if m.TokenIDs != nil || m.PromptTokenIDs != nil {
						t.Errorf("message %d keeps ids %v %v", i, m.PromptTokenIDs, m.TokenIDs)
					}
				}
				cuts := eventsOf(res.Trace, KindCut)
				if len(cuts) != 1 || cuts[0].Action != "token ids dropped" || !strings.Contains(cuts[0].Feedback, "prompt of call 2 does not start") {
					t.Errorf("cut events %+v", cuts)
				}
			},
		},
		{
			name: "reasoning is kept and given back", src: nativeSrc,
			replies: []modeltest.Reply{
				{Reasoning: "I should search.", ToolCalls: []modeltest.ToolCall{{ID: "c1", Name: "search", Arguments: `{"query": "q"}`}}},
				{Reasoning: "Found it.", Content: "<answer>42</answer>"},
			},
			want: want{finish: FinishAnswer, answer: "42", reward: 1, turns: 2},
			check: func(t *testing.T, res Result, reqs []modeltest.Request) {
				if res.Messages[2].Reasoning != "I should search." || res.Messages[4].Reasoning != "Found it." {
					t.Errorf("messages %+v", res.Messages)
				}
				if reqs[1].Messages[2].Reasoning != "I should search." || !strings.Contains(string(reqs[1].Raw), `"reasoning_content":"I should search."`) {
					t.Errorf("second request does not give the reasoning back: %s", reqs[1].Raw)
				}
			},
		},
		{
			name: "a huge tool result is cut", src: taggedSrc,
			replies: []modeltest.Reply{search("huge"), answer},
			want:    want{finish: FinishAnswer, answer: "42", reward: 1, turns: 2},
			check: func(t *testing.T, res Result, reqs []modeltest.Request) {
				got := reqs[1].Messages[3].Content
				if len(got) > 32768+64 || !strings.HasSuffix(got, "[tool result cut: 1015808 more characters]") {
					t.Errorf("tool result of %d bytes ends %q", len(got), got[len(got)-60:])
				}
				if cuts := eventsOf(res.Trace, KindCut); len(cuts) != 1 {
					t.Errorf("cut events %+v", cuts)
				}
			},
		},
		{
			name: "an action end past the reply is a hook error", src: strings.Replace(firstTagSrc, `"end": m.end()}`, `"end": 999}`, 1),
			replies: []modeltest.Reply{{Content: "<answer>42</answer>"}},
			want:    want{finish: FinishError, answer: "final after 0 steps", reward: 0.25, turns: 1, errText: "hook parse_action: action end 999 is past the end of the reply (19 bytes)"},
		},
		{
			name: "environment failure", src: taggedSrc,
			replies: []modeltest.Reply{search("crash")},
			want:    want{finish: FinishError, answer: "final after 1 steps", reward: 0.25, turns: 1, errText: `environment: step search("crash"): retriever protocol violation`},
		},
		{
			name: "should_stop", src: "FORMAT_RETRIES = 5\ndef should_stop(state):\n    return state['turn'] >= 2\n",
			replies: []modeltest.Reply{{Content: "hmm"}},
			want:    want{finish: FinishStopped, answer: "final after 0 steps", reward: 0.25, turns: 2},
		},
		{
			name: "max turns", src: "MAX_TURNS = 3\nFORMAT_RETRIES = 9\n",
			replies: []modeltest.Reply{{Content: "hmm"}},
			want:    want{finish: FinishMaxTurns, answer: "final after 0 steps", reward: 0.25, turns: 3},
		},
		{
			name: "hook runtime error names file and line", src: hookErrSrc,
			replies: []modeltest.Reply{answer},
			want:    want{finish: FinishError, answer: "final after 0 steps", reward: 0.25, turns: 1, errText: "hook parse_action: h.star:4:"},
			check: func(t *testing.T, res Result, _ []modeltest.Request) {
				if !strings.Contains(res.Error, "division by zero") {
					t.Errorf("error %q", res.Error)
				}
				ev := eventsOf(res.Trace, KindError)
				if len(ev) != 1 || ev[0].Action != "hook parse_action" || !strings.Contains(ev[0].Feedback, "Traceback") {
					t.Errorf("error events %+v", ev)
				}
			},
		},
		{
			name: "custom build_messages is traced as context", src: contextSrc,
			replies: []modeltest.Reply{{Content: "a"}, {Content: "b"}, answer},
			want:    want{finish: FinishAnswer, answer: "42", reward: 1, turns: 3},
			check: func(t *testing.T, res Result, reqs []modeltest.Request) {
				ctxs := eventsOf(res.Trace, KindContext)
				if len(ctxs) != 3 {
					t.Fatalf("%d context events, want 3", len(ctxs))
				}
				for i, ev := range ctxs {
					var got []schemas.Message
					if err := json.Unmarshal([]byte(ev.Action), &got); err != nil {
						t.Fatalf("context %d: %v", i, err)
					}
					if !slices.EqualFunc(got, reqs[i].Messages, sameMessage) {
						t.Errorf("context %d = %+v, sent %+v", i, got, reqs[i].Messages)
					}
					if ev.Turn != int32(i+1) {
						t.Errorf("context %d turn %d", i, ev.Turn)
					}
				}
				if len(reqs[2].Messages) != 3 {
					t.Errorf("third call has %d messages, want 3", len(reqs[2].Messages))
				}
				if res.Messages[0].Content != "custom sys" || len(res.Messages) != 1+6 {
					t.Errorf("messages %+v", res.Messages)
				}
			},
		},
		{
			name: "hooks see the state", src: stateSrc,
			task:    schemas.Task{ID: "t9", Question: "q", Answers: []string{"x"}, Meta: `{"rating": 1500}`},
			replies: []modeltest.Reply{{Content: "no"}, {Content: "<answer>"}},
			want:    want{finish: FinishAnswer, answer: "t9|1500|int|2|1|turn 1|4", turns: 2},
		},
		{
			name: "model id and tokens add up", src: "",
			replies: []modeltest.Reply{{Content: "?", Model: "ckpt-1", PromptTokens: 3, CompletionTokens: 1}, {Content: "<answer>42</answer>", Model: "ckpt-2", PromptTokens: 4, CompletionTokens: 2}},
			want:    want{finish: FinishAnswer, answer: "42", reward: 1, turns: 2},
			check: func(t *testing.T, res Result, _ []modeltest.Request) {
				if res.ModelID != "ckpt-2" || res.PromptTokens != 7 || res.CompletionTokens != 3 {
					t.Errorf("model %q tokens %d/%d", res.ModelID, res.PromptTokens, res.CompletionTokens)
				}
			},
		},
		{
			name: "bad task meta", src: "",
			task:    schemas.Task{ID: "t1", Question: "q", Meta: `[1, 2]`},
			replies: []modeltest.Reply{answer},
			want:    want{finish: FinishError, errText: "task: task t1: meta: want a JSON object"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := modeltest.NewServer(t, modeltest.Script(tc.replies...))
			h := loadHarness(t, tc.src)
			tk := tc.task
			if tk.ID == "" {
				tk = task("t1", "What is six times seven?", "42")
			}
			res := Run(context.Background(), &fakeDomain{contract: fakeContract()}, h, newClient(t, srv.URL, 5*time.Second), tk, tc.cfg)
			w := tc.want
			if res.FinishReason != w.finish || res.Answer != w.answer || res.Reward != w.reward || res.Turns != w.turns {
				t.Errorf("got finish=%s answer=%q reward=%g turns=%d, want finish=%s answer=%q reward=%g turns=%d (error %q)",
					res.FinishReason, res.Answer, res.Reward, res.Turns, w.finish, w.answer, w.reward, w.turns, res.Error)
			}
			if w.errText == "" && res.Error != "" || !strings.Contains(res.Error, w.errText) {
				t.Errorf("error %q, want it to contain %q", res.Error, w.errText)
			}
			if srv.Calls() != res.Turns {
				t.Errorf("%d calls, %d turns", srv.Calls(), res.Turns)
			}
			for i, ev := range res.Trace {
				if ev.Kind != KindContext && (len(ev.Action) > clipLong+8 || len(ev.Feedback) > clipLong+8) {
					t.Errorf("trace event %d too long: %d/%d bytes", i, len(ev.Action), len(ev.Feedback))
				}
			}
			if tc.check != nil {
				tc.check(t, res, srv.Requests())
			}
		})
	}
}

func TestRunFakeEnvNewEnvFails(t *testing.T) {
	srv := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: "<answer>42</answer>"}))
	dom := &fakeDomain{contract: fakeContract(), newEnvErr: errors.New("FEN does not parse")}
	res := Run(context.Background(), dom, loadHarness(t, ""), newClient(t, srv.URL, time.Second), task("p1", "q", "a"), Config{})
	if res.FinishReason != FinishError || res.Error != "environment: task p1: FEN does not parse" || res.Turns != 0 || srv.Calls() != 0 {
		t.Errorf("got %s %q turns %d calls %d", res.FinishReason, res.Error, res.Turns, srv.Calls())
	}
	if len(res.Trace) == 0 || res.Trace[len(res.Trace)-1].Kind != KindError {
		t.Errorf("trace %+v", res.Trace)
	}
}

// TestRunFakeEnvModelFaults runs one episode per fault through RunBatch
// and the real client: each yields exactly one Result, the failed ones
// with the model error's text.
func TestRunFakeEnvModelFaults(t *testing.T) {
	faults := []struct {
		question string
		reply    modeltest.Reply
		errText  string // empty: the episode succeeds
	}{
		{"ok", modeltest.Reply{Content: "<answer>42</answer>"}, ""},
		{"rate_limit", modeltest.Reply{Fault: modeltest.FaultRateLimit}, "rate_limited (HTTP 429) after 2 attempts"},
		{"server_error", modeltest.Reply{Fault: modeltest.FaultServerError}, "server_error (HTTP 500) after 2 attempts"},
		{"slow", modeltest.Reply{Delay: 5 * time.Second, Content: "<answer>42</answer>"}, "timeout"},
		{"drop", modeltest.Reply{Fault: modeltest.FaultDrop}, "connection"},
		{"drop_mid_body", modeltest.Reply{Fault: modeltest.FaultDropMidBody, Content: "<answer>42</answer>"}, "after 2 attempts"},
		{"malformed", modeltest.Reply{Fault: modeltest.FaultMalformed}, "malformed"},
		{"truncated", modeltest.Reply{Fault: modeltest.FaultTruncated, Content: "<answer>42</answer>"}, "malformed"},
		{"empty_choices", modeltest.Reply{Fault: modeltest.FaultEmptyChoices}, "malformed"},
		{"bad_request", modeltest.Reply{Fault: modeltest.FaultStatus, Status: 400}, "bad_request (HTTP 400) after 1 attempt"},
		{"ok2", modeltest.Reply{Content: "<answer>42</answer>"}, ""},
	}
	byQuestion := map[string]modeltest.Reply{}
	for _, f := range faults {
		byQuestion[f.question] = f.reply
	}
	srv := modeltest.NewServer(t, func(req *modeltest.Request) modeltest.Reply {
		return byQuestion[req.Messages[1].Content]
	})
	client := newClient(t, srv.URL, 150*time.Millisecond)
	h := loadHarness(t, "")
	dom := &fakeDomain{contract: fakeContract()}

	jobs := func(yield func(Job) bool) {
		for i, f := range faults {
			if !yield(Job{Index: i, Task: task(f.question, f.question, "42"), Seed: int64(i)}) {
				return
			}
		}
	}
	var got []Result
	err := RunBatch(context.Background(), 4, jobs, func(ctx context.Context, j Job) Result {
		return Run(ctx, dom, h, client, j.Task, Config{Seed: j.Seed})
	}, func(j Job, r Result) error {
		if j.Index != len(got) {
			t.Errorf("job %d emitted at position %d", j.Index, len(got))
		}
		got = append(got, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(faults) {
		t.Fatalf("%d results for %d episodes", len(got), len(faults))
	}
	for i, f := range faults {
		r := got[i]
		if f.errText == "" {
			if r.FinishReason != FinishAnswer || r.Error != "" || !r.Correct {
				t.Errorf("%s: finish %s error %q", f.question, r.FinishReason, r.Error)
			}
			continue
		}
		if r.FinishReason != FinishError || !strings.HasPrefix(r.Error, "model: ") || !strings.Contains(r.Error, f.errText) {
			t.Errorf("%s: finish %s error %q, want one containing %q", f.question, r.FinishReason, r.Error, f.errText)
		}
		if r.Turns != 0 || r.Answer != "final after 0 steps" {
			t.Errorf("%s: turns %d answer %q", f.question, r.Turns, r.Answer)
		}
		if ev := eventsOf(r.Trace, KindError); len(ev) != 1 || ev[0].Action != "model" {
			t.Errorf("%s: error events %+v", f.question, ev)
		}
	}
}

func TestRunFakeEnvCancel(t *testing.T) {
	cases := []struct {
		name  string
		src   string
		reply modeltest.Reply
	}{
		{"during the model call", "", modeltest.Reply{Delay: 10 * time.Second, Content: "<answer>1</answer>"}},
		{"during a tool step", taggedSrc, modeltest.Reply{Content: "<search>slow</search>"}},
		{"during a hook", "def parse_action(text, state):\n    while True:\n        pass\n", modeltest.Reply{Content: "x"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := modeltest.NewServer(t, modeltest.Always(tc.reply))
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(100*time.Millisecond, cancel)
			start := time.Now()
			// The step limit is out of reach, so that only the cancel can
			// stop the looping hook (10M steps take about 100 ms here).
			h, err := harness.Load("h.star", []byte(tc.src), harness.Options{Contract: fakeContract(), MaxSteps: 1 << 40})
			if err != nil {
				t.Fatal(err)
			}
			res := Run(ctx, &fakeDomain{contract: fakeContract()}, h, newClient(t, srv.URL, time.Minute), task("t", "q", "1"), Config{})
			if el := time.Since(start); el > 3*time.Second {
				t.Errorf("Run took %v after cancel", el)
			}
			if res.FinishReason != FinishError || !strings.HasPrefix(res.Error, "canceled: context canceled") {
				t.Errorf("finish %s error %q", res.FinishReason, res.Error)
			}
		})
	}
	t.Run("before the start", func(t *testing.T) {
		srv := modeltest.NewServer(t, modeltest.Always(modeltest.Reply{Content: "<answer>1</answer>"}))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res := Run(ctx, &fakeDomain{contract: fakeContract()}, loadHarness(t, ""), newClient(t, srv.URL, time.Minute), task("t", "q", "1"), Config{})
		if res.FinishReason != FinishError || !strings.HasPrefix(res.Error, "canceled: ") || srv.Calls() != 0 {
			t.Errorf("finish %s error %q calls %d", res.FinishReason, res.Error, srv.Calls())
		}
	})
}

func TestResultRow(t *testing.T) {
	r := Result{
		Outcome:      Outcome{Reward: 1, Correct: true, Answer: "42"},
		FinishReason: FinishAnswer, Turns: 3, PromptTokens: 100, CompletionTokens: 20,
		Latency: 1500 * time.Millisecond, ModelID: "ckpt-9",
		Messages: []schemas.Message{{Role: "user", Content: "q"}},
		Trace:    []schemas.TraceEvent{{Turn: 1, Kind: KindModel}},
	}
	base := schemas.Rollout{Run: "r", Position: "r001-w01-rollout", HarnessID: "sha256:x", TaskID: "t", Sample: 2, Seed: 9}
	cases := []struct {
		name      string
		baseModel string
		wantModel string
	}{
		{"model id from the result", "", "ckpt-9"},
		{"model id from base", "configured", "configured"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := base
			b.ModelID = tc.baseModel
			row := r.Row(b)
			want := schemas.Rollout{Run: "r", Position: "r001-w01-rollout", ModelID: tc.wantModel, HarnessID: "sha256:x", TaskID: "t", Sample: 2, Seed: 9,
				Reward: 1, Correct: true, Answer: "42", FinishReason: FinishAnswer, Turns: 3, PromptTokens: 100, CompletionTokens: 20, LatencyMS: 1500,
				Messages: r.Messages, Trace: r.Trace}
			gj, _ := json.Marshal(row)
			wj, _ := json.Marshal(want)
			if string(gj) != string(wj) {
				t.Errorf("row\n%s\nwant\n%s", gj, wj)
			}
		})
	}
}

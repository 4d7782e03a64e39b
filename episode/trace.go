package episode

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/models"
)

// Bounds on trace text. Traces go into every rollout row and into the
// proposer's workspace, so one long reply or tool result must not make a
// row megabytes; the transcript keeps the full text.
const (
	clipShort = 240  // replies, tool inputs and results, observations
	clipLong  = 2000 // hook events, errors with their backtrace
)

// Trace kinds; see the package doc.
const (
	KindHook    = "hook"
	KindModel   = "model"
	KindTool    = "tool"
	KindEnv     = "env"
	KindContext = "context"
	KindCut     = "cut"
	KindError   = "error"
)

// modelAction is a model event's action: the call's finish reason, tokens
// and cost.
func modelAction(r *models.Response) string {
	var b strings.Builder
	b.WriteString("chat: finish=" + r.FinishReason)
	if r.UsageMissing {
		b.WriteString(" usage=missing")
	} else {
		fmt.Fprintf(&b, " prompt=%d completion=%d", r.PromptTokens, r.CompletionTokens)
	}
	if len(r.ToolCalls) > 0 {
		fmt.Fprintf(&b, " tool_calls=%d", len(r.ToolCalls))
	}
	fmt.Fprintf(&b, " attempts=%d latency=%s endpoint=%s", r.Attempts, r.Latency.Round(time.Microsecond), r.Endpoint)
	return b.String()
}

// replySummary is a model event's feedback: the reply, clipped, and its
// tool calls.
func replySummary(r *models.Response) string {
	s := clip(r.Content, clipShort)
	for _, tc := range r.ToolCalls {
		s += " [call " + tc.Name + "(" + clip(tc.Arguments, clipShort/2) + ") id=" + tc.ID + "]"
	}
	return s
}

// envAction names an answer or move for an env event.
func envAction(a harness.Action) string {
	switch a.Kind {
	case "answer":
		return "answer " + quoteClip(a.Answer)
	case "move":
		return "move " + quoteClip(a.Move)
	}
	return a.Kind
}

// toolAction is a tool event's action: name("input") or name(args), and
// the native call's id.
func toolAction(a harness.Action) string {
	arg := harness.Summarize(a.Args, clipShort)
	if a.Input != "" || len(a.Args) == 0 {
		arg = quoteClip(a.Input)
	}
	s := a.Tool + "(" + arg + ")"
	if a.ID != "" {
		s += " id=" + a.ID
	}
	return s
}

// stepSummary is what the environment said to an action.
func stepSummary(st Step) string {
	if !st.Done && st.Illegal == "" && st.ToolError == "" && st.ToolResult == nil && st.Observation == nil {
		return "accepted"
	}
	var parts []string
	if st.Done {
		o := st.Outcome
		parts = append(parts, "done: reward="+strconv.FormatFloat(o.Reward, 'g', -1, 64)+" correct="+strconv.FormatBool(o.Correct)+" answer="+quoteClip(o.Answer))
	}
	if st.Illegal != "" {
		parts = append(parts, "illegal: "+clip(st.Illegal, clipShort))
	}
	if st.ToolError != "" {
		parts = append(parts, "tool error: "+clip(st.ToolError, clipShort))
	}
	if st.ToolResult != nil {
		parts = append(parts, "result: "+harness.Summarize(st.ToolResult, clipShort))
	}
	if st.Observation != nil {
		parts = append(parts, "observation: "+harness.Summarize(st.Observation, clipShort))
	}
	return strings.Join(parts, "; ")
}

// quoteClip is s clipped to clipShort and quoted.
func quoteClip(s string) string { return strconv.Quote(clip(s, clipShort)) }

// clip cuts s to at most n bytes on a rune boundary, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

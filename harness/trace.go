package harness

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/whalerun/whale/schemas"
)

// summaryLen bounds each summarized argument and result in a CallRecord.
const summaryLen = 240

// CallRecord is one hook call as the recorder sees it.
type CallRecord struct {
	Hook string
	// Default is true when the contract's Go default ran because the
	// harness does not define the hook.
	Default  bool
	Duration time.Duration
	Steps    uint64 // Starlark steps used; 0 for defaults
	Args     string // "name=value, ..." with each value summarized
	Result   string // summarized result; empty on error
	Output   string // what the hook print()ed, bounded
	Err      error

	// action and feedback are the trace event's texts as Call rendered
	// them; Args and Result are parts of the same string.
	action, feedback string
}

// Recorder receives every hook call of a Harness, in the calling goroutine,
// after the call returns. It must not call the harness back.
type Recorder func(CallRecord)

// TraceEvent turns the record into a row of the rollout's trace column:
// Kind "hook", Action the call, Feedback its result (or error) with the
// cost in brackets. For a record made by Call they are as Call rendered
// them, in one allocation with Args and Result.
func (r CallRecord) TraceEvent(turn int) schemas.TraceEvent {
	if r.action != "" {
		return schemas.TraceEvent{Turn: int32(turn), Kind: "hook", Action: r.action, Feedback: r.feedback}
	}
	fb := r.appendFeedback(make([]byte, 0, len(r.Result)+48), r.Result)
	return schemas.TraceEvent{
		Turn:     int32(turn),
		Kind:     "hook",
		Action:   r.Hook + "(" + r.Args + ")",
		Feedback: unsafe.String(unsafe.SliceData(fb), len(fb)),
	}
}

// appendFeedback appends the event's feedback, with result as the
// summarized result.
func (r *CallRecord) appendFeedback(fb []byte, result string) []byte {
	if r.Err != nil {
		fb = append(fb, "error: "...)
		fb = append(fb, r.Err.Error()...)
	} else {
		fb = append(fb, result...)
	}
	if r.Default {
		fb = append(fb, " [default, "...)
	} else {
		fb = append(fb, " ["...)
		fb = strconv.AppendUint(fb, r.Steps, 10)
		fb = append(fb, " steps, "...)
	}
	fb = appendDuration(fb, r.Duration.Round(time.Microsecond))
	fb = append(fb, ']')
	if r.Output != "" {
		fb = append(fb, " print: "...)
		fb = append(fb, clip(strings.TrimRight(r.Output, "\n"), summaryLen)...)
	}
	return fb
}

// appendDuration appends d.String(), without allocating for the short
// durations of most hook calls.
func appendDuration(b []byte, d time.Duration) []byte {
	if d > 0 && d < time.Millisecond && d%time.Microsecond == 0 {
		b = strconv.AppendInt(b, int64(d/time.Microsecond), 10)
		return append(b, "µs"...)
	}
	return append(b, d.String()...)
}

// render fills Args and Result and renders the trace event's action and
// feedback, all in one string; result writes the result's summary, and
// unread marks the arguments the hook's code never names (see appendArgs).
func (r *CallRecord) render(params []string, args []any, unread []bool, result func(*limitWriter)) {
	w := newLimitWriter()
	defer w.free()
	w.b = append(w.b, r.Hook...)
	w.b = append(w.b, '(')
	argsAt := len(w.b)
	fresh := w.appendArgs(params, args, r.Default, unread)
	argsEnd := len(w.b)
	w.b = append(w.b, ')')
	actionEnd := len(w.b)
	if r.Err == nil {
		w.summaryOf(summaryLen, func() { result(w) })
	}
	resultEnd := len(w.b)
	w.b = r.appendFeedback(w.b, "") // the result, if any, is in place
	s := string(w.b)
	r.action, r.feedback = s[:actionEnd], s[actionEnd:]
	r.Args = s[argsAt:argsEnd]
	r.Result = s[actionEnd:resultEnd]
	if fresh.st != nil {
		// The state's summary, new in this record, serves later calls
		// from the record's string: no copy of its own.
		fresh.st.summary = s[fresh.at:fresh.end]
	}
}

// freshSummary is where appendArgs rendered a state's summary that the
// state had not kept yet.
type freshSummary struct {
	st      *State
	at, end int
}

// appendArgs appends "name=value, ..." with each value summarized. A
// state's summary is rendered once per change and kept in State.summary;
// fresh says where one was rendered in place. A state is written as its
// parameter's name alone where the hook did not see it: with byName (a Go
// default's record: what a documented default does with it says nothing
// the neighbouring records and the transcript do not, and its summary was
// a third of a trace's text and of the cost of recording it) and where
// unread says the hook's code never names the parameter (it got None).
func (w *limitWriter) appendArgs(params []string, args []any, byName bool, unread []bool) (fresh freshSummary) {
	for i, a := range args {
		if i > 0 {
			w.b = append(w.b, ", "...)
		}
		w.b = append(w.b, params[i]...)
		if byName && params[i] == "state" {
			continue
		}
		if _, ok := a.(*State); ok && i < len(unread) && unread[i] {
			continue
		}
		w.b = append(w.b, '=')
		if st, ok := a.(*State); ok {
			if st.summary != "" {
				w.b = append(w.b, st.summary...)
				continue
			}
			if fresh.st == nil {
				fresh = freshSummary{st: st, at: len(w.b)}
				w.summary(st, summaryLen/2)
				fresh.end = len(w.b)
				continue
			}
		}
		w.summary(a, summaryLen/2)
	}
	return fresh
}

// Summarize renders a Go value compactly (JSON-like, dict keys sorted) in at
// most about n bytes, stopping early rather than rendering what it would cut.
func Summarize(v any, n int) string {
	w := newLimitWriter()
	defer w.free()
	w.summary(v, n)
	return w.string()
}

// AppendSummary appends Summarize(v, n) to dst, for callers that build a
// longer text around it.
func AppendSummary(dst []byte, v any, n int) []byte {
	w := limitWriter{b: dst}
	w.summary(v, n)
	return w.b
}

// limitWriter renders summaries into one buffer; the bound applies from
// base, where the current summary starts, so that several summaries can
// share the buffer.
type limitWriter struct {
	b    []byte
	base int
	max  int
	full bool
}

// summary appends v's summary in at most about n bytes.
func (w *limitWriter) summary(v any, n int) {
	w.summaryOf(n, func() { summarize(w, v, 0) })
}

// summaryOf appends what render writes as a summary in at most about n
// bytes.
func (w *limitWriter) summaryOf(n int, render func()) {
	w.base, w.max, w.full = len(w.b), n, false
	render()
	if w.full {
		// Mark the cut the way clip does, on a rune boundary.
		cut := w.base + n
		if cut < len(w.b) {
			for cut > w.base && !isRuneStart(w.b[cut]) {
				cut--
			}
			w.b = append(w.b[:cut], "…"...)
		}
	}
}

// writers recycles summary buffers: a summary is built in a scratch
// buffer and copied out at its exact size.
var writers = sync.Pool{New: func() any { return &limitWriter{b: make([]byte, 0, 512)} }}

func newLimitWriter() *limitWriter {
	w := writers.Get().(*limitWriter)
	w.b = w.b[:0]
	return w
}

func (w *limitWriter) free() {
	if cap(w.b) <= 4<<10 {
		writers.Put(w)
	}
}

func (w *limitWriter) string() string { return string(w.b) }

// room is how many more bytes the current summary may take before it is
// cut; a little slack lets the cut land past the limit, as clip expects.
func (w *limitWriter) room() int { return w.max + 8 - (len(w.b) - w.base) }

func (w *limitWriter) str(s string) bool {
	if w.full {
		return false
	}
	if len(w.b)-w.base+len(s) > w.max {
		w.b = append(w.b, s[:max(0, min(len(s), w.room()))]...)
		w.full = true
		return false
	}
	w.b = append(w.b, s...)
	return true
}

// quote appends s quoted, quoting no more of s than can show.
func (w *limitWriter) quote(s string) bool {
	if w.full {
		return false
	}
	long := len(s) > w.max
	if n := w.room(); len(s) > n {
		// Cut on a rune boundary so the quoted prefix has no \x escapes
		// for half a character.
		cut := max(n, 0)
		for cut > 0 && !isRuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	w.b = appendQuoted(w.b, s)
	if long {
		w.b = append(w.b[:len(w.b)-1], "…\""...)
	}
	return w.check()
}

// appendQuoted is strconv.AppendQuote, with a fast path for the common
// case of printable ASCII that needs no escapes.
func appendQuoted(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return strconv.AppendQuote(dst, s)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

func (w *limitWriter) int(n int) bool {
	if w.full {
		return false
	}
	w.b = strconv.AppendInt(w.b, int64(n), 10)
	return w.check()
}

// check ends the summary once it is past its bound, keeping a little of
// what went over (the final cut is on a rune boundary).
func (w *limitWriter) check() bool {
	if len(w.b)-w.base > w.max {
		w.b = w.b[:min(len(w.b), w.base+w.max+8)]
		w.full = true
		return false
	}
	return true
}

func summarize(w *limitWriter, v any, depth int) {
	if w.full {
		return
	}
	if depth > 8 {
		w.str("…")
		return
	}
	switch x := v.(type) {
	case nil:
		w.str("None")
	case bool:
		if x {
			w.str("True")
		} else {
			w.str("False")
		}
	case string:
		w.quote(x)
	case int64:
		w.b = strconv.AppendInt(w.b, x, 10)
		w.check()
	case int:
		w.int(x)
	case float64:
		w.b = strconv.AppendFloat(w.b, x, 'g', -1, 64)
		w.check()
	case []any:
		w.str("[")
		for i, e := range x {
			if i > 0 && !w.str(", ") {
				return
			}
			summarize(w, e, depth+1)
		}
		w.str("]")
	case map[string]any:
		var buf [16]string
		keys := buf[:0]
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		w.str("{")
		for i, k := range keys {
			if i > 0 && !w.str(", ") {
				return
			}
			if !w.quote(k) || !w.str(": ") {
				return
			}
			summarize(w, x[k], depth+1)
		}
		w.str("}")
	case schemas.Message:
		summarizeMessage(w, &x)
	case []schemas.Message:
		summarizeMessages(w, x)
	case *State:
		x.summarizeInto(w, depth)
	default:
		nv, err := normalize(v)
		if err != nil {
			w.str("<" + reflect.TypeOf(v).String() + ">")
			return
		}
		summarize(w, nv, depth+1)
	}
}

func summarizeMessages(w *limitWriter, msgs []schemas.Message) {
	w.str("[")
	for i := range msgs {
		if i > 0 && !w.str(", ") {
			return
		}
		summarizeMessage(w, &msgs[i])
	}
	w.str("]")
}

// summarizeMessage renders m as its message dict (see ToStarlark), keys
// sorted as for a map.
func summarizeMessage(w *limitWriter, m *schemas.Message) {
	if !w.str(`{"content": `) || !w.quote(m.Content) {
		return
	}
	if m.Name != "" && !(w.str(`, "name": `) && w.quote(m.Name)) {
		return
	}
	if !w.str(`, "role": `) || !w.quote(m.Role) {
		return
	}
	if m.ToolCallID != "" && !(w.str(`, "tool_call_id": `) && w.quote(m.ToolCallID)) {
		return
	}
	if len(m.ToolCalls) > 0 {
		if !w.str(`, "tool_calls": [`) {
			return
		}
		for i, tc := range m.ToolCalls {
			if i > 0 && !w.str(", ") {
				return
			}
			if !w.str(`{"arguments": `) || !w.quote(tc.Arguments) || !w.str(`, "id": `) || !w.quote(tc.ID) ||
				!w.str(`, "name": `) || !w.quote(tc.Name) || !w.str("}") {
				return
			}
		}
		if !w.str("]") {
			return
		}
	}
	w.str("}")
}

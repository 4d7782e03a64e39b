package harness

import (
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

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
}

// Recorder receives every hook call of a Harness, in the calling goroutine,
// after the call returns. It must not call the harness back.
type Recorder func(CallRecord)

// TraceEvent turns the record into a row of the rollout's trace column:
// Kind "hook", Action the call, Feedback its result (or error) with the
// cost in brackets.
func (r CallRecord) TraceEvent(turn int) schemas.TraceEvent {
	var fb strings.Builder
	fb.Grow(len(r.Result) + 32)
	if r.Err != nil {
		fb.WriteString("error: " + r.Err.Error())
	} else {
		fb.WriteString(r.Result)
	}
	if r.Default {
		fb.WriteString(" [default, ")
	} else {
		fb.WriteString(" [" + strconv.FormatUint(r.Steps, 10) + " steps, ")
	}
	fb.WriteString(r.Duration.Round(time.Microsecond).String() + "]")
	if r.Output != "" {
		fb.WriteString(" print: " + clip(strings.TrimRight(r.Output, "\n"), summaryLen))
	}
	return schemas.TraceEvent{Turn: int32(turn), Kind: "hook", Action: r.Hook + "(" + r.Args + ")", Feedback: fb.String()}
}

// render fills Args ("name=value, ..." with each value summarized) and
// Result. A Go default's record names its state argument without a
// summary: what a documented default does with it says nothing the
// neighbouring records and the transcript do not, and the state's summary
// was a third of a trace's text.
func (r *CallRecord) render(params []string, args []any, result any) {
	var b strings.Builder
	b.Grow(64)
	for i, a := range args {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(params[i])
		if r.Default && params[i] == "state" {
			continue
		}
		b.WriteString("=" + Summarize(a, summaryLen/2))
	}
	r.Args = b.String()
	if r.Err == nil {
		r.Result = Summarize(result, summaryLen)
	}
}

// Summarize renders a Go value compactly (JSON-like, dict keys sorted) in at
// most about n bytes, stopping early rather than rendering what it would cut.
func Summarize(v any, n int) string {
	w := limitWriter{b: make([]byte, 0, min(n, 256)+8)}
	w.summary(v, n)
	return string(w.b)
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
	w.b = strconv.AppendQuote(w.b, s)
	if long {
		w.b = append(w.b[:len(w.b)-1], "…\""...)
	}
	return w.check()
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
	case []schemas.Message:
		// Message by message: a summary shows a few of them at most.
		w.str("[")
		for i, m := range x {
			if i > 0 && !w.str(", ") {
				return
			}
			summarize(w, MessageDict(m), depth+1)
		}
		w.str("]")
	default:
		nv, err := normalize(v)
		if err != nil {
			w.str("<" + reflect.TypeOf(v).String() + ">")
			return
		}
		summarize(w, nv, depth+1)
	}
}

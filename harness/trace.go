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
}

// Recorder receives every hook call of a Harness, in the calling goroutine,
// after the call returns. It must not call the harness back.
type Recorder func(CallRecord)

// TraceEvent turns the record into a row of the rollout's trace column:
// Kind "hook", Action the call, Feedback its result (or error) with the
// cost in brackets.
func (r CallRecord) TraceEvent(turn int) schemas.TraceEvent {
	fb := make([]byte, 0, len(r.Result)+48)
	if r.Err != nil {
		fb = append(fb, "error: "...)
		fb = append(fb, r.Err.Error()...)
	} else {
		fb = append(fb, r.Result...)
	}
	if r.Default {
		fb = append(fb, " [default, "...)
	} else {
		fb = append(fb, " ["...)
		fb = strconv.AppendUint(fb, r.Steps, 10)
		fb = append(fb, " steps, "...)
	}
	fb = append(fb, r.Duration.Round(time.Microsecond).String()...)
	fb = append(fb, ']')
	if r.Output != "" {
		fb = append(fb, " print: "...)
		fb = append(fb, clip(strings.TrimRight(r.Output, "\n"), summaryLen)...)
	}
	return schemas.TraceEvent{
		Turn:     int32(turn),
		Kind:     "hook",
		Action:   r.Hook + "(" + r.Args + ")",
		Feedback: unsafe.String(unsafe.SliceData(fb), len(fb)),
	}
}

func summarizeArgs(params []string, args []any) string {
	w := newLimitWriter()
	defer w.free()
	for i, a := range args {
		if i > 0 {
			w.b = append(w.b, ", "...)
		}
		w.b = append(w.b, params[i]...)
		w.b = append(w.b, '=')
		w.summary(a, summaryLen/2)
	}
	return w.string()
}

// Summarize renders a Go value compactly (JSON-like, dict keys sorted) in at
// most about n bytes, stopping early rather than rendering what it would cut.
func Summarize(v any, n int) string {
	w := newLimitWriter()
	defer w.free()
	w.summary(v, n)
	return w.string()
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
	w.base, w.max, w.full = len(w.b), n, false
	summarize(w, v, 0)
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
		w.b = strconv.AppendInt(w.b, int64(x), 10)
		w.check()
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
		w.str("[")
		for i := range x {
			if i > 0 && !w.str(", ") {
				return
			}
			summarizeMessage(w, &x[i])
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

// summarizeMessage renders m as the dict {"content", "role"} (keys sorted,
// as for a map).
func summarizeMessage(w *limitWriter, m *schemas.Message) {
	_ = w.str(`{"content": `) && w.quote(m.Content) && w.str(`, "role": `) && w.quote(m.Role) && w.str("}")
}

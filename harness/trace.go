package harness

import (
	"fmt"
	"sort"
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
	if r.Err != nil {
		fb.WriteString("error: ")
		fb.WriteString(r.Err.Error())
	} else {
		fb.WriteString(r.Result)
	}
	if r.Default {
		fmt.Fprintf(&fb, " [default, %s]", r.Duration.Round(time.Microsecond))
	} else {
		fmt.Fprintf(&fb, " [%d steps, %s]", r.Steps, r.Duration.Round(time.Microsecond))
	}
	if r.Output != "" {
		fb.WriteString(" print: ")
		fb.WriteString(clip(strings.TrimRight(r.Output, "\n"), summaryLen))
	}
	return schemas.TraceEvent{
		Turn:     int32(turn),
		Kind:     "hook",
		Action:   r.Hook + "(" + r.Args + ")",
		Feedback: fb.String(),
	}
}

func summarizeArgs(params []string, args []any) string {
	parts := make([]string, len(args))
	for i, a := range args {
		parts[i] = params[i] + "=" + Summarize(a, summaryLen/2)
	}
	return strings.Join(parts, ", ")
}

// Summarize renders a Go value compactly (JSON-like, dict keys sorted) in at
// most about n bytes, stopping early rather than rendering what it would cut.
func Summarize(v any, n int) string {
	w := &limitWriter{max: n}
	summarize(w, v, 0)
	if w.full {
		return clip(w.b.String(), n)
	}
	return w.b.String()
}

type limitWriter struct {
	b    strings.Builder
	max  int
	full bool
}

func (w *limitWriter) str(s string) bool {
	if w.full {
		return false
	}
	if w.b.Len()+len(s) > w.max {
		w.b.WriteString(s[:min(len(s), w.max-w.b.Len()+8)])
		w.full = true
		return false
	}
	w.b.WriteString(s)
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
		q := strconv.Quote(x[:min(len(x), w.max)])
		if len(x) > w.max {
			q = q[:len(q)-1] + "…\""
		}
		w.str(q)
	case int64:
		w.str(strconv.FormatInt(x, 10))
	case int:
		w.str(strconv.Itoa(x))
	case float64:
		w.str(strconv.FormatFloat(x, 'g', -1, 64))
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
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		w.str("{")
		for i, k := range keys {
			if i > 0 && !w.str(", ") {
				return
			}
			w.str(strconv.Quote(k) + ": ")
			summarize(w, x[k], depth+1)
		}
		w.str("}")
	case schemas.Message:
		summarize(w, map[string]any{"role": x.Role, "content": x.Content}, depth)
	case []schemas.Message:
		w.str("[")
		for i, m := range x {
			if i > 0 && !w.str(", ") {
				return
			}
			summarize(w, m, depth+1)
		}
		w.str("]")
	default:
		nv, err := normalize(v)
		if err != nil {
			w.str(fmt.Sprintf("<%T>", v))
			return
		}
		summarize(w, nv, depth+1)
	}
}

package propose

import (
	"bytes"
	"fmt"
	"io"

	"github.com/whalerun/whale/internal/redact"
)

// Bounds of agent.log, the agent's output (both streams) as stored.
const (
	// agentLogBytes is how much of the start of the output is stored,
	// streamed to the stage's spooled output file as it comes: 64 MiB,
	// many hours of a chatty coding agent.
	agentLogBytes = 64 << 20
	// agentLogTailBytes is how much of the end is kept as well, in
	// memory, when the output is longer: an agent's last words say how
	// it ended. What lies between is counted, never stored.
	agentLogTailBytes = 256 << 10
	// agentLogChunk is how much output is held before a piece of it is
	// scrubbed and written.
	agentLogChunk = 64 << 10
)

// logWriter stores the agent's output as agent.log while the agent runs:
// the first limit bytes, then, when there is more, a line saying how much
// was cut and the last agentLogTailBytes. Every byte written goes
// through sc (the values of whale's secret variables, then URL
// credentials) before it reaches out.
//
// The output is scrubbed piece by piece, so a piece must never end inside
// a secret value (its head would be too short to be found, and so
// stored). A piece therefore ends only where no value straddles the cut
// (safeCut), which needs sc.Longest()-1 bytes after the cut: the writer
// holds at most agentLogChunk + sc.Longest() bytes. Cuts fall after a
// newline where the piece has one, so that a URL is scrubbed whole.
type logWriter struct {
	out   io.Writer
	sc    *redact.Scrubber
	limit int64
	buf   []byte // output from off on, not yet written
	off   int64  // stream offset of buf[0]
	// headDone: the output passed limit; off is where the head ended.
	headDone bool
	tail     *tail // the end of the output, every byte of it
	err      error // the first write error of out
}

func newLogWriter(out io.Writer, sc *redact.Scrubber, limit int64) *logWriter {
	return &logWriter{out: out, sc: sc, limit: limit, tail: &tail{max: agentLogTailBytes + sc.Longest()}}
}

// Write never fails: the agent's output is read to its end whatever
// becomes of the log (Close reports a failed upload).
func (w *logWriter) Write(p []byte) (int, error) {
	_, _ = w.tail.Write(p)
	if w.headDone {
		return len(p), nil
	}
	// Up to Longest bytes past the limit are kept: the head's last cut
	// looks at them.
	room := w.limit + int64(w.sc.Longest()) - w.off - int64(len(w.buf))
	w.buf = append(w.buf, p[:min(int64(len(p)), max(room, 0))]...)
	w.pump(false)
	return len(p), nil
}

// pump writes what can be written of buf: pieces of about agentLogChunk
// bytes, or, once the output passed the limit (or at its end), the rest
// of the head.
func (w *logWriter) pump(final bool) {
	long := w.sc.Longest()
	for !w.headDone {
		end := w.off + int64(len(w.buf))
		switch {
		// The output passed the limit (buf stops Longest bytes past it,
		// at the limit itself when no secret is known).
		case w.tail.total > w.limit && (final || end >= w.limit+int64(long)):
			q := safeCut(w.buf, int(w.limit-w.off), w.sc)
			w.emit(w.buf[:q])
			w.off += int64(q)
			w.buf, w.headDone = nil, true
			return
		case final:
			w.emit(w.buf)
			w.off = end
			w.buf = nil
			return
		case len(w.buf) >= agentLogChunk+long:
			q := safeCut(w.buf, len(w.buf)-long, w.sc)
			if q == 0 {
				return // values overlap back to the start: wait for more
			}
			w.emit(w.buf[:q])
			w.off += int64(q)
			w.buf = append(w.buf[:0:0], w.buf[q:]...)
		default:
			return
		}
	}
}

func (w *logWriter) emit(b []byte) {
	if w.err != nil || len(b) == 0 {
		return
	}
	_, w.err = io.WriteString(w.out, w.sc.Text(string(b)))
}

// Close writes the rest: the head's end, and past the limit the tail.
// It returns the first error of out.
func (w *logWriter) Close() error {
	w.pump(true)
	b, cut := w.tail.bytes() // cut: the stream offset of b[0]
	total := w.tail.total
	switch {
	case total <= w.off:
	case cut <= w.off:
		// The tail goes on where the head ended, at a safe cut.
		w.emit(b[w.off-cut:])
	default:
		drop := safeStart(b, w.sc)
		if w.err == nil {
			_, w.err = fmt.Fprintf(w.out, "\n[whale: the agent wrote %d bytes; agent.log keeps the first %d and the last %d: bytes %d to %d are cut]\n",
				total, w.off, len(b)-drop, w.off, cut+int64(drop))
		}
		w.emit(b[drop:])
	}
	return w.err
}

// lastLine is the last non-empty line of the output, for an error.
func (w *logWriter) lastLine() string {
	b, _ := w.tail.bytes()
	return w.sc.Text(lastOutputLine(b))
}

// cutSeparators end a piece of a long line: redact.Text's matches (a
// URL, a key=value parameter) never hold one of them.
const cutSeparators = " \t\"'"

// safeCut returns where a piece of b that should end at q may end: at or
// before q, after a newline in the 4 KiB before q where there is one,
// else after the last space or quote before q (0 when there is none),
// and never inside an occurrence of a secret value. b must hold the
// Longest()-1 bytes after q, or end where the stream ends.
func safeCut(b []byte, q int, sc *redact.Scrubber) int {
	q = max(0, min(q, len(b)))
	lo := max(0, q-4096)
	if i := bytes.LastIndexByte(b[lo:q], '\n'); i >= 0 {
		q = lo + i + 1
	} else {
		// A long line (an agent's JSON stream): cut after a space or a
		// quote, which no URL or key=value match of redact.Text holds,
		// so neither piece keeps half of one that redact.Text misses;
		// with none before q, nothing of b goes in this piece.
		q = bytes.LastIndexAny(b[:q], cutSeparators) + 1
	}
	long := sc.Longest()
	if long == 0 {
		return q
	}
	// A value straddling q lies within b[q-long+1 : q+long-1]; a cut
	// moves to its start, where another may straddle in turn.
	for q > 0 {
		lo, hi := max(0, q-long+1), min(len(b), q+long-1)
		w := string(b[lo:hi])
		moved := false
		for off := 0; off < len(w); {
			i, n := sc.Index(w[off:])
			if i < 0 {
				break
			}
			start := lo + off + i
			if start < q && start+n > q {
				q, moved = start, true
				break
			}
			off += i + 1
		}
		if !moved {
			return q
		}
	}
	return 0
}

// safeStart returns where the text of b, the tail of a stream cut
// before b[0], may start: past the first Longest bytes (a secret cut
// at b[0] ends there), after the end of that line where it ends within
// 4 KiB, and never inside an occurrence of a secret value (one that
// begins in the bytes dropped).
func safeStart(b []byte, sc *redact.Scrubber) int {
	long := sc.Longest()
	s := min(long, len(b))
	if i := bytes.IndexByte(b[s:min(len(b), s+4096)], '\n'); i >= 0 {
		s += i + 1
	} else if i := bytes.IndexAny(b[s:], cutSeparators); i >= 0 {
		s += i + 1 // as in safeCut
	} else {
		s = len(b) // one token to the end: none of it is kept
	}
	if long == 0 {
		return s
	}
	// An occurrence straddling s lies within b[s-long+1 : s+long-1],
	// all of it in b as s ≥ long; the start moves to its end, where
	// another may straddle in turn.
	for s < len(b) {
		lo, hi := s-long+1, min(len(b), s+long-1)
		w := string(b[lo:hi])
		moved := false
		for off := 0; off < len(w); {
			i, n := sc.Index(w[off:])
			if i < 0 {
				break
			}
			start := lo + off + i
			if start < s && start+n > s {
				s, moved = start+n, true
				break
			}
			off += i + 1
		}
		if !moved {
			return s
		}
	}
	return len(b)
}

// tail is an io.Writer that keeps the last max bytes written to it.
type tail struct {
	max   int
	buf   []byte
	total int64
}

func (t *tail) Write(p []byte) (int, error) {
	t.total += int64(len(p))
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		return len(p), nil
	}
	t.buf = append(t.buf, p...)
	if len(t.buf) > 2*t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

// bytes returns the last max bytes and the stream offset of the first.
func (t *tail) bytes() ([]byte, int64) {
	b := t.buf
	if len(b) > t.max {
		b = b[len(b)-t.max:]
	}
	return b, t.total - int64(len(b))
}

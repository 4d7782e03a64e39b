package propose

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/whalerun/whale/internal/redact"
)

const (
	logSecret      = "abcdefghijklmnopqrstuvwxyz0123456789"
	logShortSecret = "SHORTSECRET-xyz" // a prefix of no other
)

// logOutput is agent output of about n bytes holding the secrets at many
// offsets: in short lines, and in long lines with no newline, so that
// the writer must cut inside lines too.
func logOutput(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	var b bytes.Buffer
	for b.Len() < n {
		switch rng.IntN(4) {
		case 0:
			fmt.Fprintf(&b, "step %d: the key is %s.\n", b.Len(), logSecret)
		case 1:
			// A long line: secrets every few hundred bytes, no newline.
			for range 300 {
				b.WriteString(strings.Repeat("x", rng.IntN(400)))
				if rng.IntN(2) == 0 {
					b.WriteString(logSecret)
				} else {
					b.WriteString(logShortSecret + logSecret) // back to back
				}
			}
			b.WriteByte('\n')
		default:
			b.WriteString(strings.Repeat("text ", rng.IntN(40)) + "\n")
		}
	}
	return b.Bytes()
}

// Within the limit the stored log is the whole output scrubbed, exactly
// as scrubbing it in one piece would give, however it was written.
func TestLogWriterStreamsWhole(t *testing.T) {
	sc := redact.Secrets([]string{"SOME_TOKEN=" + logSecret, "OTHER_TOKEN=" + logShortSecret})
	for _, c := range []struct {
		size, write int
	}{{1 << 10, 1}, {300 << 10, 7}, {300 << 10, 4096}, {300 << 10, 100 << 10}, {1 << 20, 65537}} {
		all := logOutput(c.size, uint64(c.write))
		var out bytes.Buffer
		w := newLogWriter(&out, sc, 64<<20)
		for p := range slices.Chunk(all, c.write) {
			if n, err := w.Write(p); n != len(p) || err != nil {
				t.Fatal(n, err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		want := sc.Text(string(all))
		if out.String() != want {
			t.Fatalf("%d bytes in writes of %d: stored log differs from the scrubbed output (%d vs %d bytes)", len(all), c.write, out.Len(), len(want))
		}
		if strings.Contains(out.String(), logSecret[:10]) || strings.Contains(out.String(), logShortSecret[:8]) {
			t.Fatalf("a secret shows")
		}
	}
}

// Past the limit: the head, a line saying what was cut, and the tail;
// no piece of a secret at either cut.
func TestLogWriterLimit(t *testing.T) {
	sc := redact.Secrets([]string{"SOME_TOKEN=" + logSecret, "OTHER_TOKEN=" + logShortSecret})
	for seed := range uint64(8) {
		all := logOutput(600<<10, seed)
		limit := int64(200<<10 + seed*997)
		var out bytes.Buffer
		w := newLogWriter(&out, sc, limit)
		for p := range slices.Chunk(all, 1000+int(seed)*331) {
			w.Write(p)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		got := out.String()
		for i := 0; i+8 <= len(logSecret); i++ {
			if strings.Contains(got, logSecret[i:i+8]) {
				t.Fatalf("seed %d: %q of the secret shows", seed, logSecret[i:i+8])
			}
		}
		for i := 0; i+8 <= len(logShortSecret); i++ {
			if strings.Contains(got, logShortSecret[i:i+8]) {
				t.Fatalf("seed %d: %q of the short secret shows", seed, logShortSecret[i:i+8])
			}
		}
		mark := fmt.Sprintf("[whale: the agent wrote %d bytes; agent.log keeps the first ", len(all))
		i := strings.Index(got, mark)
		if i < 0 {
			t.Fatalf("seed %d: no cut line in %d bytes", seed, len(got))
		}
		head := got[:i]
		if int64(len(head)) > limit+1 || !strings.HasPrefix(sc.Text(string(all[:limit+1000])), strings.TrimSuffix(head, "\n")) {
			t.Fatalf("seed %d: the head (%d bytes, limit %d) is not the start of the scrubbed output", seed, len(head), limit)
		}
		if !strings.HasSuffix(got, sc.Text(string(all[len(all)-1000:]))[200:]) {
			t.Fatalf("seed %d: the log does not end with the output's end", seed)
		}
		if len(got) > int(limit)+agentLogTailBytes+200 {
			t.Fatalf("seed %d: %d bytes stored", seed, len(got))
		}
	}
}

// A short output over the limit by less than the tail: stored whole.
func TestLogWriterJustOver(t *testing.T) {
	sc := redact.Secrets([]string{"SOME_TOKEN=" + logSecret})
	all := logOutput(100<<10, 3)
	var out bytes.Buffer
	w := newLogWriter(&out, sc, 90<<10)
	w.Write(all)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if out.String() != sc.Text(string(all)) {
		t.Fatal("an output within limit + tail is stored whole")
	}
}

func TestSafeCut(t *testing.T) {
	sc := redact.Secrets([]string{"A_TOKEN=0123456789abcdef"})
	b := []byte("xxxxx0123456789abcdefyyyy0123456789abcdef0123456789abcdefzz")
	for q := range len(b) + 1 {
		c := safeCut(b, q, sc)
		if c > q {
			t.Fatalf("cut %d after %d", c, q)
		}
		for _, s := range []int{5, 25, 41} {
			if c > s && c < s+16 {
				t.Fatalf("safeCut(%d) = %d, inside the secret at %d", q, c, s)
			}
		}
	}
	if c := safeCut([]byte("line one\nline two"), 14, sc); c != 9 {
		t.Fatalf("cut %d, want after the newline", c)
	}
}

// A URL parameter whose value whale does not know (not in its
// environment) on a line of hundreds of KiB, the shape of an agent's JSON
// stream: wherever the writes and the head/tail cut fall, no piece keeps
// a part of the value that redact.Text would no longer recognise.
func TestLogWriterLongLinesKeepURLsWhole(t *testing.T) {
	const value = "Zq9SeCrEtVaLuE0123456789"
	sc := redact.Secrets(nil)
	var line strings.Builder
	for i := 0; line.Len() < 200<<10; i++ {
		fmt.Fprintf(&line, `{"type":"tool","n":%d,"text":"fetch https://api.example.com/v1?api_key=%s&x=%d done"} `, i, value, i)
	}
	all := []byte(line.String() + "\n")
	for _, chunk := range []int{32 << 10, 4093, 65 << 10} {
		for off := range 20 {
			limit := int64(64<<10 + off*131)
			var out bytes.Buffer
			w := newLogWriter(&out, sc, limit)
			w.Write(all[:off*97])
			for p := range slices.Chunk(all[off*97:], chunk) {
				w.Write(p)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			got := out.String()
			for i := 0; i+6 <= len(value); i++ {
				if strings.Contains(got, value[i:i+6]) {
					t.Fatalf("chunk %d, offset %d: %q of the value shows", chunk, off, value[i:i+6])
				}
			}
		}
	}
}

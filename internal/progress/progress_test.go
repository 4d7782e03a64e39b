package progress

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"
)

func TestCounts(t *testing.T) {
	for _, c := range []struct {
		name         string
		n, fail      int
		wantDone     int64
		wantFailed   int64
		closeOnTotal bool
	}{
		{"all", 10, 3, 10, 3, true},
		{"none failed", 5, 0, 5, 0, true},
		{"stopped early", 4, 4, 4, 4, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			b := New(&buf, "rollout", 10)
			var wg sync.WaitGroup
			for i := range c.n {
				wg.Go(func() { b.Add(i < c.fail) })
			}
			wg.Wait()
			b.Close()
			b.Close()
			done, failed := b.Counts()
			if done != c.wantDone || failed != c.wantFailed {
				t.Fatalf("counts %d/%d, want %d/%d", done, failed, c.wantDone, c.wantFailed)
			}
			if buf.Len() != 0 {
				t.Fatalf("a bar on a non-terminal wrote %q", buf.String())
			}
		})
	}
}

func TestNotTerminal(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) || IsTerminal(nil) || IsTerminal(&bytes.Buffer{}) {
		t.Fatal("a file, nil or a buffer counted as a terminal")
	}
	b := New(f, "x", 2)
	b.Add(false)
	b.Close()
	if st, _ := f.Stat(); st.Size() != 0 {
		t.Fatalf("bar wrote %d bytes to a plain file", st.Size())
	}
	var nb *Bar
	nb.Add(true)
	nb.Close()
	if d, _ := nb.Counts(); d != 0 {
		t.Fatal("nil bar counted")
	}
}

// A drawn bar shows the title, the counters and the failures.
func TestDraw(t *testing.T) {
	var buf bytes.Buffer
	b := start(&buf, "rollout r001-w01", 3, true)
	b.Add(false)
	b.Add(true)
	b.Add(false)
	b.Close()
	out := buf.String()
	for _, want := range []string{"rollout r001-w01", "3/3", "failed 1", "/s"} {
		if !strings.Contains(out, want) {
			t.Errorf("drawn bar %q lacks %q", out, want)
		}
	}
}

func BenchmarkAdd(b *testing.B) {
	bar := New(nil, "x", int64(b.N))
	for b.Loop() {
		bar.Add(false)
	}
	bar.Close()
}

// A board draws one line per row with its counter and status, fills a row
// that ends below its total, and draws nothing off a terminal.
func TestBoard(t *testing.T) {
	var buf bytes.Buffer
	b := newBoard(&buf, true)
	a := b.Add("demo-whale", 100)
	c := b.Add("demo-weights-only", 100)
	a.Set(40, "rollout r001-w02")
	a.Done("done: test 0.31")
	c.Set(70, "finetune r002-w01")
	b.Close()
	out := buf.String()
	for _, want := range []string{"demo-whale", "demo-weights-only", "done: test 0.31", "finetune r002-w01", "70/100"} {
		if !strings.Contains(out, want) {
			t.Errorf("board %q lacks %q", out, want)
		}
	}
	if a.Status() != "done: test 0.31" {
		t.Errorf("status %q", a.Status())
	}

	buf.Reset()
	q := NewBoard(&buf)
	r := q.Add("x", 10)
	r.Set(5, "half")
	r.Done("done")
	q.Close()
	if q.Drawing() || buf.Len() != 0 || r.Status() != "done" {
		t.Errorf("off a terminal: drawing %v, wrote %q, status %q", q.Drawing(), buf.String(), r.Status())
	}
}

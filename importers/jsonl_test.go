package importers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/whalerun/whale/schemas"
)

func TestJSONLTestdata(t *testing.T) {
	f, err := os.Open("testdata/tasks.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []schemas.Task
	if err := JSONL(context.Background(), f, "testdata/tasks.jsonl", Options{Domain: "searchqa", Split: "dev"}, collect(t, &got)); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		task schemas.Task
		meta map[string]any
	}{
		{schemas.Task{ID: "nq-train-0", Domain: "searchqa", Split: "train", Question: "who wrote the declaration of independence?",
			Answers: []string{"Thomas Jefferson", "Jefferson"}}, map[string]any{"data_source": "nq"}},
		{schemas.Task{ID: "17", Domain: "math", Split: "dev", Question: "What is the remainder when $2^{10}$ is divided by 7?",
			Answers: []string{"2"}}, map[string]any{"level": 3.0, "source": "handwritten"}},
		{schemas.Task{ID: "tasks-4", Domain: "searchqa", Split: "dev", Question: "What is the capital of France?",
			Answers: []string{"Paris"}}, map[string]any{"ability": "fact-reasoning", "prompt": []any{
			map[string]any{"role": "system", "content": "Answer briefly."},
			map[string]any{"role": "user", "content": "What is the capital of France?"}}}},
		{schemas.Task{ID: "tasks-5", Domain: "searchqa", Split: "dev", Question: "Which river flows through Kraków — the Vistula or the Oder?",
			Answers: []string{"Vistula", "Wisła"}}, map[string]any{"source": "meta wins"}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d tasks, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		meta := metaOf(t, g)
		g.Meta = ""
		if !reflect.DeepEqual(g, w.task) {
			t.Errorf("task %d:\n got %+v\nwant %+v", i, g, w.task)
		}
		if !reflect.DeepEqual(meta, w.meta) {
			t.Errorf("task %d meta:\n got %v\nwant %v", i, meta, w.meta)
		}
	}
}

// goodLines returns n valid JSONL lines.
func goodLines(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"id": "q%d", "question": "question %d", "answer": "a%d"}`+"\n", i, i, i)
	}
	return b.String()
}

func TestJSONLBadInput(t *testing.T) {
	prefix := goodLines(36)
	tests := []struct {
		name  string
		line  string
		opts  Options
		wants []string
	}{
		{"broken JSON at line 37", `{"id": "x", "question": "q", "answer": "a"`, Options{Domain: "math"},
			[]string{"tasks.jsonl:37:", "invalid JSON: unexpected end of JSON input"}},
		{"syntax error has a column", `{"id": "x", "question": 'q'}`, Options{Domain: "math"},
			[]string{"tasks.jsonl:37:25: invalid JSON: invalid character '\\'' looking for beginning of value"}},
		{"missing question", `{"id": "x", "answer": "a"}`, Options{Domain: "math"},
			[]string{`tasks.jsonl:37: missing field "question" (or "prompt", "problem")`}},
		{"missing answers", `{"question": "q"}`, Options{Domain: "math"},
			[]string{`tasks.jsonl:37: missing field "answers"`}},
		{"not an object", `["q", "a"]`, Options{Domain: "math"},
			[]string{`tasks.jsonl:37: expected a JSON object, found array`}},
		{"trailing garbage", `{"question": "q", "answer": "a"} x`, Options{Domain: "math"},
			[]string{`tasks.jsonl:37:`, `invalid JSON`}},
		{"answers not a list", `{"question": "q", "answers": "a"}`, Options{Domain: "math"},
			[]string{`tasks.jsonl:37: field "answers": expected a list of strings, found string`}},
		{"empty answers", `{"question": "q", "answers": []}`, Options{Domain: "math"},
			[]string{`tasks.jsonl:37: field "answers": has no answers`}},
		{"answer item type", `{"question": "q", "golden_answers": ["a", {"x": 1}]}`, Options{Domain: "math"},
			[]string{`tasks.jsonl:37: field "golden_answers": item 1: expected a string or number, found object`}},
		{"id type", `{"id": true, "question": "q", "answer": "a"}`, Options{Domain: "math"},
			[]string{`tasks.jsonl:37: field "id": expected a string or number, found boolean`}},
		{"question type", `{"question": 5, "answer": "a"}`, Options{Domain: "math"},
			[]string{`tasks.jsonl:37: field "question": expected a string, found number`}},
		{"empty question", `{"question": "  ", "answer": "a"}`, Options{Domain: "math"},
			[]string{`tasks.jsonl:37: field "question": is empty`}},
		{"no domain", `{"question": "q", "answer": "a"}`, Options{},
			[]string{`tasks.jsonl:1: missing field "domain" and no domain given`}},
		{"domain type", `{"question": "q", "answer": "a", "domain": 1}`, Options{Domain: "math"},
			[]string{`tasks.jsonl:37: field "domain": expected a string, found number`}},
		{"meta type", `{"question": "q", "answer": "a", "meta": [1]}`, Options{Domain: "math"},
			[]string{`tasks.jsonl:37: field "meta": expected an object, found array`}},
		{"prompt without user", `{"prompt": [{"role": "system", "content": "s"}], "answer": "a"}`, Options{Domain: "math"},
			[]string{`tasks.jsonl:37: field "prompt": no message with role "user"`}},
		{"reward_model without ground truth", `{"question": "q", "reward_model": {"style": "rule"}}`, Options{Domain: "math"},
			[]string{`tasks.jsonl:37: field "reward_model": missing ground_truth`}},
		{"line too long", `{"question": "` + strings.Repeat("x", 2000) + `", "answer": "a"}`, Options{Domain: "math", MaxLineBytes: 1000},
			[]string{`tasks.jsonl:37: line is longer than 1000 bytes`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := 0
			err := JSONL(context.Background(), strings.NewReader(prefix+tt.line+"\n"+goodLines(3)), "tasks.jsonl", tt.opts,
				func(schemas.Task) error { n++; return nil })
			wantErr(t, err, tt.wants...)
		})
	}
}

func TestJSONLLinesAndEndings(t *testing.T) {
	long := strings.Repeat("λ", 300_000) // 600 kB: beyond any bufio buffer
	input := "\xEF\xBB\xBF" + `{"question": "first", "answer": "a"}` + "\r\n" +
		"\r\n   \n" +
		`{"question": "` + long + `", "answers": [1, 2.5]}` + "\n" +
		`{"question": "last", "answer": ["x", "y"]}` // no final newline
	var got []schemas.Task
	if err := JSONL(context.Background(), strings.NewReader(input), "dir/my.set.jsonl", Options{Domain: "demo"}, collect(t, &got)); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("got %d tasks", len(got))
	}
	if got[0].ID != "my.set-1" || got[1].ID != "my.set-4" || got[2].ID != "my.set-5" {
		t.Errorf("ids %s %s %s, want my.set-1 my.set-4 my.set-5", got[0].ID, got[1].ID, got[2].ID)
	}
	if got[1].Question != long || !reflect.DeepEqual(got[1].Answers, []string{"1", "2.5"}) {
		t.Errorf("long line: %d bytes, answers %v", len(got[1].Question), got[1].Answers)
	}
	if !reflect.DeepEqual(got[2].Answers, []string{"x", "y"}) {
		t.Errorf("answer list: %v", got[2].Answers)
	}
}

func TestJSONLCallbackErrorStops(t *testing.T) {
	stop := errors.New("disk full")
	n := 0
	err := JSONL(context.Background(), strings.NewReader(goodLines(10)), "t.jsonl", Options{Domain: "math"},
		func(schemas.Task) error {
			n++
			if n == 3 {
				return stop
			}
			return nil
		})
	if !errors.Is(err, stop) || !strings.Contains(err.Error(), "t.jsonl:3: task not accepted: disk full") {
		t.Errorf("err = %v", err)
	}
	if n != 3 {
		t.Errorf("fn called %d times after its error", n)
	}
}

func TestJSONLContextCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	err := JSONL(ctx, strings.NewReader(goodLines(2000)), "t.jsonl", Options{Domain: "math"},
		func(schemas.Task) error {
			if n++; n == 10 {
				cancel()
			}
			return nil
		})
	if !errors.Is(err, context.Canceled) || n >= 2000 {
		t.Errorf("err = %v after %d tasks", err, n)
	}
}

// lineSource streams n generated JSONL lines without holding them.
type lineSource struct {
	n, i int
	buf  bytes.Buffer
}

func (s *lineSource) Read(p []byte) (int, error) {
	for s.buf.Len() < len(p) && s.i < s.n {
		fmt.Fprintf(&s.buf, `{"id": "q%d", "question": "%s", "answers": ["a"], "pad": "%s"}`+"\n", s.i, strings.Repeat("q", 200), strings.Repeat("p", 800))
		s.i++
	}
	if s.buf.Len() == 0 {
		return 0, io.EOF
	}
	return s.buf.Read(p)
}

func TestJSONLMemoryFlat(t *testing.T) {
	if testing.Short() {
		t.Skip("streams 64 MB; skipped in -short mode")
	}
	const lines = 64 << 10 // × ~1 kB = 64 MB
	var peak uint64
	var ms runtime.MemStats
	n := 0
	err := JSONL(context.Background(), &lineSource{n: lines}, "big.jsonl", Options{Domain: "math"}, func(schemas.Task) error {
		if n++; n%4096 == 0 {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapAlloc)
		}
		return nil
	})
	if err != nil || n != lines {
		t.Fatalf("err %v after %d tasks", err, n)
	}
	if peak > 32<<20 {
		t.Errorf("heap reached %d MB while streaming 64 MB: the importer holds the input", peak>>20)
	}
	t.Logf("peak heap %.1f MB for 64 MB of JSONL", float64(peak)/(1<<20))
}

func BenchmarkJSONL(b *testing.B) {
	data := []byte(goodLines(10000))
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		n := 0
		if err := JSONL(context.Background(), bytes.NewReader(data), "b.jsonl", Options{Domain: "math"}, func(schemas.Task) error { n++; return nil }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*10000)/b.Elapsed().Seconds(), "tasks/s")
}

func FuzzJSONL(f *testing.F) {
	if data, err := os.ReadFile("testdata/tasks.jsonl"); err == nil {
		f.Add(data)
		for line := range bytes.SplitSeq(data, []byte("\n")) {
			f.Add(line)
		}
	}
	f.Add([]byte(`{"question": "q", "answer": 1e400}`))
	f.Add([]byte(`{"prompt": [{"role": "user", "content": 3}], "answer": "a"}`))
	f.Add([]byte(`{"question": "q", "reward_model": {"ground_truth": {"target": "x"}}}`))
	f.Add([]byte("\xEF\xBB\xBF{\"question\": \"\\u0000\", \"answer\": null}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var got []schemas.Task
		err := JSONL(context.Background(), bytes.NewReader(data), "f.jsonl", Options{Domain: "math", MaxLineBytes: 1 << 16}, collect(t, &got))
		if err != nil {
			var ie *Error
			if !errors.As(err, &ie) {
				t.Fatalf("error is %T, not *Error: %v", err, err)
			}
			if ie.Line < 1 {
				t.Fatalf("error without a line: %v", err)
			}
		}
	})
}

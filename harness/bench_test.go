package harness

import (
	"fmt"
	"testing"

	"github.com/whalerun/whale/schemas"
)

func BenchmarkCallTrivialHook(b *testing.B) {
	h := mustLoad(b, "def should_stop(state):\n    return False\n", Options{})
	st := map[string]any{"turn": 1}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.Call(bg, "should_stop", st); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCallDefaultHook(b *testing.B) {
	h := mustLoad(b, "", Options{})
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.Call(bg, "parse_action", "so <answer>4</answer>", map[string]any{"turn": 1}); err != nil {
			b.Fatal(err)
		}
	}
}

// A realistic build_messages: the example harness's context window over a
// state of 10 messages of a few hundred bytes each.
func BenchmarkCallBuildMessages10(b *testing.B) {
	h := loadExample(b)
	msgs := []schemas.Message{{Role: "user", Content: "Question: who wrote Hamlet?"}}
	for i := 0; len(msgs) < 10; i++ {
		msgs = append(msgs,
			schemas.Message{Role: "assistant", Content: fmt.Sprintf("Let me search. <search>query %d</search>", i)},
			schemas.Message{Role: "tool", Content: fmt.Sprintf("<information>%0300d</information>", i)})
	}
	st := exampleState(0)
	st["messages"] = msgs[:10]
	b.ReportAllocs()
	for b.Loop() {
		v, err := h.Call(bg, "build_messages", st)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := MessagesFrom(v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCallBuildMessages10Recorded(b *testing.B) {
	h := loadExample(b)
	var n int
	h = h.WithRecorder(func(r CallRecord) { n += len(r.TraceEvent(1).Action) })
	st := exampleState(5)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.Call(bg, "build_messages", st); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLoadExample(b *testing.B) {
	for b.Loop() {
		loadExample(b)
	}
}

package harness

import (
	"os"
	"strings"
	"testing"

	"github.com/whalerun/whale/schemas"
)

func searchContract() *Contract {
	return Base().Extend(Contract{
		Name: "searchqa-test",
		Constants: []ConstSpec{
			{Name: "TOPK", Type: TypeInt, Default: 3, Min: Bound(1), Max: Bound(20), Doc: "Passages per search."},
		},
	})
}

func loadExample(t testing.TB) *Harness {
	t.Helper()
	src, err := os.ReadFile("testdata/searchqa_like.star")
	if err != nil {
		t.Fatal(err)
	}
	h, err := Load("searchqa_like.star", src, Options{Contract: searchContract()})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func exampleState(nTools int) map[string]any {
	msgs := []schemas.Message{{Role: "user", Content: "Question: who wrote Hamlet?"}}
	for i := 0; i < nTools; i++ {
		msgs = append(msgs,
			schemas.Message{Role: "assistant", Content: "<search>Hamlet author</search>"},
			schemas.Message{Role: "tool", Content: "<information>Doc 1 (Hamlet): a tragedy by William Shakespeare …</information>"})
	}
	return map[string]any{
		"task":        map[string]any{"id": "t1", "question": "who wrote Hamlet?", "meta": map[string]any{}},
		"turn":        nTools,
		"messages":    msgs,
		"last_action": nil,
		"retries":     map[string]any{"format": 0, "illegal": 0},
	}
}

func TestExampleHarness(t *testing.T) {
	h := loadExample(t)
	if w := h.Warnings(); len(w) != 0 {
		t.Errorf("warnings: %v", w)
	}
	if h.Int("MAX_TURNS") != 6 || h.Int("TOPK") != 3 || !strings.HasPrefix(h.String("SYSTEM_PROMPT"), "Answer the question.") {
		t.Errorf("constants %v", h.Constants())
	}

	obs, err := h.Call(bg, "format_observation", map[string]any{"question": "who wrote Hamlet?"})
	if err != nil || obs != "Question: who wrote Hamlet?" {
		t.Errorf("format_observation = %q, %v", obs, err)
	}

	v, err := h.Call(bg, "build_messages", exampleState(4))
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := MessagesFrom(v)
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 10 || msgs[0].Role != "system" {
		t.Fatalf("%d messages, first %q", len(msgs), msgs[0].Role)
	}
	omitted := 0
	for _, m := range msgs {
		if m.Content == "[older search results omitted]" {
			omitted++
		}
	}
	if omitted != 2 || msgs[9].Content == "[older search results omitted]" {
		t.Errorf("omitted %d tool results (want the 2 oldest)", omitted)
	}

	for text, want := range map[string]Action{
		"I'll look. <search> Hamlet author </search>":      {Kind: "tool", Tool: "search", Input: "Hamlet author"},
		"It is <answer>Shakespeare</answer>":               {Kind: "answer", Answer: "Shakespeare"},
		"<answer>x</answer> wait <answer>William</answer>": {Kind: "answer", Answer: "William"},
		"hmm": {Kind: "invalid"},
	} {
		v, err := h.Call(bg, "parse_action", text, exampleState(0))
		a, _ := ActionFrom(v)
		if err != nil || a.Kind != want.Kind || a.Answer != want.Answer || a.Tool != want.Tool || a.Input != want.Input {
			t.Errorf("parse_action(%q) = %+v, %v", text, a, err)
		}
	}

	res := map[string]any{"docs": []any{
		map[string]any{"id": "1", "contents": "Hamlet\n" + strings.Repeat("Hamlet is a tragedy. ", 40)},
		map[string]any{"id": "2", "contents": "Shakespeare\nEnglish playwright."},
	}}
	out, err := h.Call(bg, "format_tool_result", res, exampleState(1))
	if err != nil {
		t.Fatal(err)
	}
	s := out.(string)
	wantContains(t, "tool result", s, "<information>\nDoc 1 (Hamlet): Hamlet is a tragedy.", "…\nDoc 2 (Shakespeare): English playwright.\n</information>")

	st := exampleState(0)
	st["retries"] = map[string]any{"format": 2, "illegal": 0}
	if v, err := h.Call(bg, "should_stop", st); err != nil || v != true {
		t.Errorf("should_stop = %v, %v", v, err)
	}
	if v, err := h.Call(bg, "should_stop", exampleState(0)); err != nil || v != nil {
		t.Errorf("should_stop = %v, %v; want None", v, err)
	}
}

func TestDocCoversContract(t *testing.T) {
	c := testContract()
	doc := c.Doc()
	for _, k := range c.Constants {
		wantContains(t, "doc", doc, "### `"+k.Name+"` — "+string(k.Type), k.Doc)
	}
	for _, h := range c.Hooks {
		wantContains(t, "doc", doc, "### `"+h.Name+"("+strings.Join(h.Params, ", ")+")` → "+h.Returns.String(), h.DefaultDoc)
	}
	for name, hb := range c.Helpers {
		wantContains(t, "doc", doc, "- `"+name+"("+strings.Join(hb.Params, ", ")+")` → "+hb.Returns+": "+hb.Doc)
	}
	wantContains(t, "doc", doc,
		"# Harness contract: test",
		"int, 1 to 50", "list (list of string)", "Default: `3`", "Default: `[\"a\",\"the\"]`", "Default: `False`",
		"Fields: `{question}`, `{fen}`.",
		"`move`: `{kind: \"move\", move: string, end?: int, ...}`",
		"## State", "## Domain helpers", "## Builtins", "## Rules", "RE2")
}

package choice

import "testing"

type row string

func (r row) Name() string { return string(r) }

func TestChoice(t *testing.T) {
	rows := []row{"mutate", "llm", "agent"}
	if got := OrList(Names(rows)); got != "mutate, llm or agent" {
		t.Errorf("OrList = %q", got)
	}
	for names, want := range map[string]string{"": "", "a": "a", "a,b": "a or b"} {
		var in []string
		if names != "" {
			in = splitComma(names)
		}
		if got := OrList(in); got != want {
			t.Errorf("OrList(%q) = %q, want %q", in, got, want)
		}
	}
	if r, ok := Find(rows, "llm"); !ok || r != "llm" {
		t.Errorf("Find llm = %q %v", r, ok)
	}
	if _, ok := Find(rows, "nope"); ok {
		t.Error("found nope")
	}
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := range len(s) {
		if s[i] == ',' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

package mathdomain

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTruncate(t *testing.T) {
	cases := []struct {
		in   string
		max  int
		want string
		cut  bool
	}{
		{"hello", 10, "hello", false},
		{"hello", 5, "hello", false},
		{"hello", 3, "hel", true},
		{"héllo", 2, "h", true}, // é is two bytes; half of it is dropped
		{"héllo", 3, "hé", true},
		{"日本", 4, "日", true},
		{"日本", 0, "日本", false},
	}
	for _, c := range cases {
		got, cut := truncate(c.in, c.max)
		if got != c.want || cut != c.cut {
			t.Errorf("truncate(%q, %d) = %q, %v; want %q, %v", c.in, c.max, got, cut, c.want, c.cut)
		}
	}
}

func TestCapWriter(t *testing.T) {
	w := &capWriter{max: 10}
	for _, chunk := range []string{"abc", "défg", "hijklmnop", "é"} {
		if n, err := w.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", chunk, n, err)
		}
	}
	got, cut := w.text()
	// 10 bytes kept: "abcdéfghi" is 10 bytes exactly.
	if got != "abcdéfghi" || !cut || w.dropped != int64(len("jklmnopé")) {
		t.Errorf("text %q cut %v dropped %d", got, cut, w.dropped)
	}
	w = &capWriter{max: 4}
	w.Write([]byte("abcé"))
	if got, cut := w.text(); got != "abc" || !cut || !utf8.ValidString(got) {
		t.Errorf("split rune: %q %v", got, cut)
	}
	w = &capWriter{max: 100}
	w.Write([]byte(strings.Repeat("x", 100)))
	if got, cut := w.text(); len(got) != 100 || cut {
		t.Errorf("exactly full: %d %v", len(got), cut)
	}
}

func TestClassifyExit(t *testing.T) {
	cases := []struct {
		code   int
		stderr string
		want   string
	}{
		{0, "", StatusOK},
		{1, "Traceback...\nValueError: x\n", StatusError},
		{1, "Traceback...\nMemoryError\n", StatusOOM},
		{1, "Traceback...\nMemoryError: cannot allocate\n\n", StatusOOM},
		{1, "Traceback...\nValueError: MemoryError is not the last line\n", StatusError},
		{-9, "", StatusOOM},
		{137, "", StatusOOM},
		{-15, "", StatusError},
		{134, "terminate called after throwing an instance of 'std::bad_alloc'", StatusOOM},
		{1, "OSError: [Errno 12] Cannot allocate memory", StatusOOM},
	}
	for _, c := range cases {
		if got := classifyExit(c.code, c.stderr); got != c.want {
			t.Errorf("classifyExit(%d, %q) = %q, want %q", c.code, c.stderr, got, c.want)
		}
	}
}

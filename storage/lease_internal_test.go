package storage

import (
	"strconv"
	"strings"
	"testing"
)

func TestParseGeneration(t *testing.T) {
	tests := []struct {
		name string
		gen  int64
		ok   bool
	}{
		{"0000000001.json", 1, true},
		{"0000000042.json", 42, true},
		{"12345678901.json", 12345678901, true},
		{"0000000000.json", 0, false},
		{"1.json", 0, false},
		{"000000001.json", 0, false},
		{"00000000001.json", 0, false}, // not how generation 1 is written
		{"0000000001.JSON", 0, false},
		{"0000000001.json.tmp", 0, false},
		{"+000000001.json", 0, false},
		{"99999999999999999999.json", 0, false},
		{"notes.txt", 0, false},
	}
	for _, tc := range tests {
		g, ok := parseGeneration(tc.name)
		if g != tc.gen || ok != tc.ok {
			t.Errorf("parseGeneration(%q) = %d, %v; want %d, %v", tc.name, g, ok, tc.gen, tc.ok)
		}
	}
}

func FuzzParseGeneration(f *testing.F) {
	for _, s := range []string{"0000000001.json", "1.json", "00000000001.json", "9223372036854775807.json"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		g, ok := parseGeneration(name)
		if !ok {
			return
		}
		// Accepted names are exactly the canonical ones, so that one
		// generation has one key.
		if g <= 0 || generationName(g) != name || !strings.HasSuffix(name, ".json") {
			t.Fatalf("parseGeneration(%q) = %d", name, g)
		}
		if _, err := strconv.ParseInt(strings.TrimSuffix(name, ".json"), 10, 64); err != nil {
			t.Fatalf("accepted %q: %v", name, err)
		}
	})
}

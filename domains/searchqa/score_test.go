package searchqa

import (
	"math"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestNormalize(t *testing.T) {
	tests := []struct{ in, want string }{
		{"The Beatles", "beatles"},
		{"  A  Tale of Two   Cities ", "tale of two cities"},
		{"an apple", "apple"},
		{"Théâtre", "théâtre"},
		{"the theatre", "theatre"},         // "the" inside a word stays
		{"Anne and Andy", "anne and andy"}, // articles only as whole words
		{"a.b.c", "abc"},                   // punctuation goes before articles are found
		{"U.S.A.", "usa"},
		{"rock-n-roll", "rocknroll"},
		{"Ol’ Man River", "ol’ man river"}, // Unicode punctuation is kept, as in the reference
		{"«Les Misérables»", "«les misérables»"},
		{"éa b", "éa b"},  // no word boundary between é and a
		{"a\u00a0b", "b"}, // NBSP is whitespace
		{"x\x1cy", "x y"}, // Python's str.split splits on U+001C
		{"THE", ""},
		{"", ""},
		{"\tline\nbreak\r\n", "line break"},
		{"A_B", "ab"}, // underscore is punctuation
		{"the_end", "theend"},
		{"ΣΟΦΙΑ", "σοφια"},
		// Python's str.lower, not strings.ToLower: full case mapping of
		// U+0130 and the final-sigma rule.
		{"\u0130stanbul", "i\u0307stanbul"},
		{"ΟΔΟΣ", "οδος"},
		{"ΣΑΣ. ΣΑΣ", "σας σας"},
		{"Σ", "σ"},
		{"AΣ\u0301 b", "aς\u0301 b"},
		{"the\u0301 end", "\u0301 end"}, // a combining mark is not a word character
		{"ǅemal", "ǆemal"},
		{"1,000", "1000"},
		{"$5.00", "500"},
		{"a an the", ""},
		{"An\tthe\na", ""},
	}
	for _, tc := range tests {
		if got := Normalize(tc.in); got != tc.want {
			t.Errorf("Normalize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestExactMatch(t *testing.T) {
	tests := []struct {
		pred  string
		golds []string
		want  bool
	}{
		{"Mary Shelley", []string{"Mary Shelley"}, true},
		{"mary shelley", []string{"Mary Shelley"}, true},
		{"Mary Shelley.", []string{"Mary Shelley"}, true},
		{"the Nile", []string{"Nile"}, true},
		{"Nile", []string{"the Nile River"}, false},
		{"Nile", []string{"the Nile River", "Nile"}, true},
		{"The United States of America", []string{"united states of america"}, true},
		{"an Apple", []string{"Apple"}, true},
		{"Apple Inc", []string{"Apple"}, false},
		{"", []string{"Apple"}, false},
		{"the", []string{"a"}, false}, // both normalise to "": never a match
		{"x", []string{"", "the"}, false},
		{"x", nil, false},
		{"Yes", []string{"yes"}, true},
		{"yes.", []string{"yes"}, true},
		{"no", []string{"yes"}, false},
		{"1989", []string{"1989"}, true},
		{"in 1989", []string{"1989"}, false},
		{"Théâtre", []string{"théâtre"}, true},
		{"Theatre", []string{"théâtre"}, false},
		{"  Canberra\n", []string{"Canberra"}, true},
		{"São Paulo", []string{"SÃO PAULO"}, true},
		{"rock 'n' roll", []string{"rock n roll"}, true},
	}
	for _, tc := range tests {
		if got := ExactMatch(tc.pred, tc.golds); got != tc.want {
			t.Errorf("ExactMatch(%q, %q) = %v, want %v", tc.pred, tc.golds, got, tc.want)
		}
	}
}

func TestSubEM(t *testing.T) {
	tests := []struct {
		pred  string
		golds []string
		want  bool
	}{
		{"The author was Mary Shelley.", []string{"Mary Shelley"}, true},
		{"Mary", []string{"Mary Shelley"}, false},
		{"in 1989", []string{"1989"}, true},
		{"19899", []string{"1989"}, true}, // a character substring, as in the reference
		{"smart", []string{"art"}, true},
		{"yes, it is", []string{"yes"}, true},
		{"", []string{"yes"}, false},
		{"anything", []string{"the"}, false}, // an empty normalised gold never matches
		{"anything", []string{"", "thing"}, true},
		{"the Nile River", []string{"Nile"}, true},
		{"Nile", []string{"the Nile River"}, false},
	}
	for _, tc := range tests {
		if got := SubEM(tc.pred, tc.golds); got != tc.want {
			t.Errorf("SubEM(%q, %q) = %v, want %v", tc.pred, tc.golds, got, tc.want)
		}
	}
}

func TestF1(t *testing.T) {
	tests := []struct {
		pred  string
		golds []string
		want  float64
	}{
		{"Mary Shelley", []string{"Mary Shelley"}, 1},
		{"Mary", []string{"Mary Shelley"}, 2.0 / 3},                              // p=1 r=1/2
		{"Mary Shelley wrote it", []string{"Mary Shelley"}, 2.0 / 3},             // p=1/2 r=1
		{"Percy Shelley", []string{"Mary Shelley", "Percy Bysshe Shelley"}, 0.8}, // best gold: p=1 r=2/3
		{"the the the", []string{"the"}, 0},
		{"", []string{"x"}, 0},
		{"x", []string{""}, 0},
		{"yes", []string{"yes"}, 1},
		{"yes it is", []string{"yes"}, 0}, // yes/no answers earn no partial credit
		{"no", []string{"no way"}, 0},
		{"noanswer", []string{"noanswer"}, 1},
		{"a b b", []string{"b b c"}, 0.8}, // "a" is an article: "b b" vs "b b c", p=1 r=2/3
		{"New York City", []string{"york new"}, 0.8},
	}
	for _, tc := range tests {
		if got := F1(tc.pred, tc.golds); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("F1(%q, %q) = %v, want %v", tc.pred, tc.golds, got, tc.want)
		}
	}
}

func TestExtractAnswer(t *testing.T) {
	tests := []struct {
		name, in string
		want     string
		ok       bool
	}{
		{"plain", "<answer>Paris</answer>", "Paris", true},
		{"spaces trimmed", "<think>...</think>\n<answer>  Paris \n</answer>", "Paris", true},
		{"missing", "The answer is Paris.", "", false},
		{"unclosed", "<answer>Paris", "", false},
		{"close only", "Paris</answer>", "", false},
		{"twice takes last", "<answer>Lyon</answer> wait, no: <answer>Paris</answer>", "Paris", true},
		{"empty", "<answer></answer>", "", true},
		{"nested takes inner", "<answer>a <answer>b</answer> c</answer>", "b", true},
		{"truncated after a complete one", "<answer>Lyon</answer> <answer>Par", "Lyon", true},
		{"extra close", "<answer>Lyon</answer> junk </answer>", "Lyon", true},
		{"case sensitive", "<ANSWER>Paris</ANSWER>", "", false},
		{"multiline", "<answer>Mary\nShelley</answer>", "Mary\nShelley", true},
		{"reversed tags", "</answer>x<answer>", "", false},
		{"unicode", "<answer>São Paulo</answer>", "São Paulo", true},
		{"search then answer", "<search>capital of France</search><information>Paris is...</information><answer>Paris</answer>", "Paris", true},
	}
	for _, tc := range tests {
		got, ok := ExtractAnswer(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: ExtractAnswer(%q) = %q, %v; want %q, %v", tc.name, tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestVerify(t *testing.T) {
	tests := []struct {
		resp  string
		golds []string
		want  Result
	}{
		{"<answer>The Nile</answer>", []string{"Nile"}, Result{Extracted: "The Nile", Found: true, EM: true, SubEM: true, F1: 1, Reward: 1}},
		{"<answer>the Nile River</answer>", []string{"Nile"}, Result{Extracted: "the Nile River", Found: true, SubEM: true, F1: 2.0 / 3}},
		{"Nile", []string{"Nile"}, Result{}},
		{"<answer></answer>", []string{"Nile"}, Result{Found: true}},
		{"<answer>Yes</answer>", []string{"yes"}, Result{Extracted: "Yes", Found: true, EM: true, SubEM: true, F1: 1, Reward: 1}},
	}
	for _, tc := range tests {
		got := Verify(tc.resp, tc.golds)
		if got.Extracted != tc.want.Extracted || got.Found != tc.want.Found || got.EM != tc.want.EM ||
			got.SubEM != tc.want.SubEM || math.Abs(got.F1-tc.want.F1) > 1e-9 || got.Reward != tc.want.Reward {
			t.Errorf("Verify(%q, %q) = %+v, want %+v", tc.resp, tc.golds, got, tc.want)
		}
	}
}

func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"The Beatles", "a.b the_end", "éa", "x\x1cy", "\xff\xfeA", "İstanbul", "ΣΑΣ", "  An  ", "a\u0301n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := Normalize(s)
		if n2 := Normalize(n); n2 != n {
			t.Fatalf("not idempotent: %q -> %q -> %q", s, n, n2)
		}
		if strings.HasPrefix(n, " ") || strings.HasSuffix(n, " ") || strings.Contains(n, "  ") {
			t.Fatalf("whitespace not collapsed: %q -> %q", s, n)
		}
		if !utf8.ValidString(n) {
			t.Fatalf("invalid UTF-8 out of %q: %q", s, n)
		}
		for _, w := range strings.Split(n, " ") {
			if w == "a" || w == "an" || w == "the" {
				t.Fatalf("article left in %q -> %q", s, n)
			}
		}
	})
}

func FuzzExtractAnswer(f *testing.F) {
	for _, s := range []string{"<answer>x</answer>", "<answer>a<answer>b</answer>c</answer>", "</answer><answer>", "<answer><answer></answer></answer>", "no tags"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := ExtractAnswer(s)
		if !ok {
			if got != "" {
				t.Fatalf("not found but returned %q", got)
			}
			if i := strings.Index(s, openTag); i >= 0 && strings.Contains(s[i+len(openTag):], closeTag) {
				t.Fatalf("missed a closed tag pair in %q", s)
			}
			return
		}
		if strings.Contains(got, closeTag) || strings.Contains(got, openTag) {
			t.Fatalf("answer %q of %q contains a tag", got, s)
		}
		// The answer, wrapped again and appended, is what comes back.
		if again, ok := ExtractAnswer(s + openTag + got + closeTag); !ok || again != got {
			t.Fatalf("re-wrapping %q gave %q, %v", got, again, ok)
		}
		if !strings.Contains(s, got) {
			t.Fatalf("answer %q is not part of %q", got, s)
		}
	})
}

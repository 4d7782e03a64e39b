package mathdomain

import (
	"strings"
	"testing"
)

var fuzzSeeds = []string{
	"", `\boxed{42}`, `\boxed{\frac{1}{2}}`, `\boxed 5$`, `\fbox{x}`, `\boxed{`, `\boxed{\}`, `}\boxed{{}}{`,
	`\boxed{1} \boxed{2`, "```\n\\boxed{3}\n```", `\boxed\boxed{1}`, `\boxed{\\}`, `\boxed5\]`,
	`\frac12`, `\dfrac{-1}{2}`, `\left(1,2\right]`, `1{,}000`, `50\%`, `30^{\circ}`, `10\text{ cm}^2`,
	`x = \sqrt 2`, `\{1,2\}`, `-\frac{-\sqrt{3}}{2}`, "0.50", "+.5", "{{5}.}", "5cm.cm.cm.",
	`\text{\text{a}}`, `\frac\frac12`, `\sqrt[3`, `\\text{x}`, `\left.\frac{1}{2}\right|`, "1/0",
}

func FuzzExtract(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, found := Extract(s)
		if !strings.Contains(s, got) {
			t.Fatalf("Extract(%q) = %q, not a substring", s, got)
		}
		if found == (got == "") {
			t.Fatalf("Extract(%q) = %q, found=%v", s, got, found)
		}
		if found && strings.TrimSpace(got) != got {
			t.Fatalf("Extract(%q) = %q, not trimmed", s, got)
		}
	})
}

func FuzzNormalize(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := Normalize(s)
		if again := Normalize(n); again != n {
			t.Fatalf("not idempotent: Normalize(%q) = %q, Normalize(%q) = %q", s, n, n, again)
		}
	})
}

func FuzzEquivalent(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add(s, fuzzSeeds[(i+1)%len(fuzzSeeds)])
	}
	f.Add("0.5", `\frac{1}{2}`)
	f.Add("(1,2)", `\left(1, 2\right)`)
	f.Add("1, 2", "2, 1")
	f.Fuzz(func(t *testing.T, a, b string) {
		ab, ba := Equivalent(a, b), Equivalent(b, a)
		if ab != ba {
			t.Fatalf("Equivalent(%q, %q) = %v but reversed %v", a, b, ab, ba)
		}
		// An answer and its normal form are the same answer.
		if Normalize(a) != "" && !Equivalent(a, Normalize(a)) {
			t.Fatalf("Equivalent(%q, Normalize = %q) = false", a, Normalize(a))
		}
	})
}

package mathdomain

import (
	"strings"
	"testing"
)

func TestExtract(t *testing.T) {
	cases := []struct {
		name, in, want string
		found          bool
	}{
		{"plain", `The answer is \boxed{42}.`, "42", true},
		{"nested braces", `so $\boxed{\frac{1}{2}}$`, `\frac{1}{2}`, true},
		{"deeply nested", `\boxed{\frac{\sqrt{\frac{1}{2}}}{3}}`, `\frac{\sqrt{\frac{1}{2}}}{3}`, true},
		{"last of two", `first \boxed{3}, then \boxed{4}`, "4", true},
		{"fbox", `\fbox{7}`, "7", true},
		{"fbox after boxed", `\boxed{1} and finally \fbox{2}`, "2", true},
		{"boxed after fbox", `\fbox{1} and finally \boxed{2}`, "2", true},
		{"no braces", `$\boxed 5$`, "5", true},
		{"no braces no space", `$\boxed5$.`, "5", true},
		{"no braces to line end", "\\boxed 12\nmore text", "12", true},
		{"no braces before display end", `\[\boxed 3\]`, "3", true},
		{"no braces inside group", `$\fbox{\boxed 5}$`, "5", true},
		{"space before brace", `\boxed {9}`, "9", true},
		{"escaped braces", `\boxed{\{1,2\}}`, `\{1,2\}`, true},
		{"escaped brace does not close", `\boxed{\}`, "", false},
		{"unbalanced", `\boxed{\frac{1}{2}`, "", false},
		{"unbalanced last, balanced earlier", `\boxed{1} then \boxed{2`, "", false},
		{"empty box", `\boxed{}`, "", false},
		{"blank box", `\boxed{  }`, "", false},
		{"bare command at end", `the answer is \boxed`, "", false},
		{"other command", `\boxedfoo{3}`, "", false},
		{"other command after box", `\boxed{2} \boxedfoo{3}`, "2", true},
		{"none", `The answer is 42.`, "", false},
		{"in code block", "```python\nprint('\\\\boxed{5}')\n```", "5", true},
		{"in prose", `I think \boxed{12} is right, since 3*4=12.`, "12", true},
		{"trimmed", `\boxed{ 8 }`, "8", true},
		{"nested box", `\boxed{\boxed{6}}`, "6", true},
		{"line break before group", `\boxed{a\\{b}}`, `a\\{b}`, true},
		{"utf8", `\boxed{π}`, "π", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, found := Extract(c.in)
			if got != c.want || found != c.found {
				t.Errorf("Extract(%q) = %q, %v; want %q, %v", c.in, got, found, c.want, c.found)
			}
			if !strings.Contains(c.in, got) {
				t.Errorf("Extract(%q) = %q is not a substring", c.in, got)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	cases := []struct{ in, want string }{
		{"42", "42"},
		{" 42 ", "42"},
		{"+42", "42"},
		{"042", "42"},
		{"-0", "0"},
		{"0.50", "0.5"},
		{"5.0", "5"},
		{"5.00", "5"},
		{".5", "0.5"},
		{"5.", "5"},
		{"1,000", "1000"},
		{"1{,}000", "1000"},
		{`1\,000`, "1000"},
		{`1,\!000,\!000`, "1000000"},
		{"12,345.60", "12345.6"},
		{"1,2", "1,2"},
		{"1,00", "1,00"},
		{`\dfrac{1}{2}`, `\frac{1}{2}`},
		{`\tfrac12`, `\frac{1}{2}`},
		{`\frac12`, `\frac{1}{2}`},
		{`\frac1{72}`, `\frac{1}{72}`},
		{`\frac{1}2`, `\frac{1}{2}`},
		{`\frac ab`, `\frac{a}{b}`},
		{`\frac\pi2`, `\frac{\pi}{2}`},
		{`\frac{\frac12}{3}`, `\frac{\frac{1}{2}}{3}`},
		{`\sqrt2`, `\sqrt{2}`},
		{`2\sqrt 3`, `2\sqrt{3}`},
		{`\sqrt[3]2`, `\sqrt[3]{2}`},
		{`\frac{-1}{2}`, `-\frac{1}{2}`},
		{`\frac{1}{-2}`, `-\frac{1}{2}`},
		{`-\frac{-1}{2}`, `\frac{1}{2}`},
		{`\frac{-1+x}{2}`, `\frac{-1+x}{2}`},
		{`\frac{-\sqrt{3}}{2}`, `-\frac{\sqrt{3}}{2}`},
		{"1/2", `\frac{1}{2}`},
		{"-3/4", `-\frac{3}{4}`},
		{`\left(1, 2\right)`, "(1,2)"},
		{`\left[0,1\right)`, "[0,1)"},
		{`\left\{1,2\right\}`, `\{1,2\}`},
		{`\$5`, "5"},
		{`$5$`, "5"},
		{`\(5\)`, "5"},
		{`10\text{ cm}`, "10"},
		{`10 \mbox{cm}`, "10"},
		{`10\text{ cm}^2`, "10"},
		{`\text{10 cm}`, "10"},
		{"10 cm", "10"},
		{"10cm", "10"},
		{"12 square units", "12"},
		{"5 cm.", "5"},
		{`30^\circ`, "30"},
		{`30^{\circ}`, "30"},
		{`30^{ \circ }`, "30"},
		{"30°", "30"},
		{"30 degrees", "30"},
		{`50\%`, "50"},
		{"50%", "50"},
		{`\text{(A)}`, "A"},
		{"(204)", "204"},
		{"[7]", "7"},
		{"(x+1)", "(x+1)"},
		{"m+n=204", "204"},
		{"a = b = 3", "3"},
		{`k=\frac12`, `\frac{1}{2}`},
		{"x<=5", "x<=5"},
		{"2x+3=y", "2x+3=y"},
		{`\sqrt{2}/2`, `\frac{\sqrt{2}}{2}`},
		{`\pi/2`, `\frac{\pi}{2}`},
		{"x/2", "x/2"},
		{"−5", "-5"},
		{`5^{th}`, "5"},
		{`5^{\text{th}}`, "5"},
		{"21st", "21"},
		{`\textbf{Yes}`, "Yes"},
		{`1 \text{ and } 2`, "1,2"},
		{"x = 5", "5"},
		{`\theta=30^\circ`, "30"},
		{"y=2x+3", "2x+3"},
		{"a=1, b=2", "a=1,b=2"},
		{`\pi r^2`, `\pi r^2`},
		{`2 \pi`, `2\pi`},
		{"{5}", "5"},
		{"{{5}}", "5"},
		{`\!5\;`, "5"},
		{`3\quad`, "3"},
		{`\displaystyle\frac{1}{2}`, `\frac{1}{2}`},
		{`\sec x`, `\sec x`},
		{`2\sec`, `2\sec`},
		{"3m", "3m"},
		{"", ""},
		{"...", ""},
		{`\\text{x}`, `\\text{x}`},
	}
	for _, c := range cases {
		got := Normalize(c.in)
		if got != c.want {
			t.Errorf("Normalize(%q) = %q, want %q", c.in, got, c.want)
		}
		if again := Normalize(got); again != got {
			t.Errorf("Normalize not idempotent on %q: %q then %q", c.in, got, again)
		}
	}
}

func TestEquivalent(t *testing.T) {
	cases := []struct {
		a, b string
		want bool
	}{
		{"0.5", `\frac{1}{2}`, true},
		{"0.5", "1/2", true},
		{`\frac{2}{4}`, `\frac{1}{2}`, true},
		{`-\frac{1}{2}`, `\frac{-1}{2}`, true},
		{"-0.5", `\frac{1}{-2}`, true},
		{"1/2", "1/3", false},
		{"0.333", `\frac{1}{3}`, false},
		{"12", "121", false},
		{"12", "12.0", true},
		{"1e3", "1000", false},
		{`\frac{1}{0}`, `\frac{2}{0}`, false},
		{`\frac{1}{0}`, `\frac{1}{0}`, true},
		{`2\sqrt{3}`, `2\sqrt3`, true},
		{`\sqrt{12}`, `2\sqrt{3}`, false},
		{"(1,2)", `\left(1, 2\right)`, true},
		{"(1,2)", "(2,1)", false},
		{"(0.5,2)", `(\frac12, 2)`, true},
		{"[0,1)", "[0,1]", false},
		{"[0,1)", "(0,1)", false},
		{`\{1,2\}`, `\{2,1\}`, true},
		{"1, 2", "2, 1", true},
		{"1, 2", "1, 2, 3", false},
		{"1, 1, 2", "1, 2, 2", false},
		{"(1,2)", "1,2", false},
		{"(1,(2,3))", "(1,(2,3.0))", true},
		{"", "", false},
		{"", "0", false},
		{`\pi`, `\pi`, true},
		{"x", "X", false},
	}
	for _, c := range cases {
		if got := Equivalent(c.a, c.b); got != c.want {
			t.Errorf("Equivalent(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
		if got := Equivalent(c.b, c.a); got != c.want {
			t.Errorf("Equivalent(%q, %q) = %v, want %v (symmetry)", c.b, c.a, got, c.want)
		}
	}
}

func TestVerify(t *testing.T) {
	cases := []struct {
		name     string
		response string
		answers  []string
		found    bool
		correct  bool
	}{
		// Formats of a right answer.
		{"integer", `So the answer is $\boxed{204}$.`, []string{"204"}, true, true},
		{"integer with plus", `\boxed{+204}`, []string{"204"}, true, true},
		{"integer leading zero", `\boxed{033}`, []string{"33"}, true, true},
		{"nested fraction", `\boxed{\frac{1}{2}}`, []string{"1/2"}, true, true},
		{"dfrac", `\boxed{\dfrac{3}{4}}`, []string{`\frac{3}{4}`}, true, true},
		{"tfrac shorthand", `\boxed{\tfrac34}`, []string{"0.75"}, true, true},
		{"decimal for fraction", `\boxed{0.5}`, []string{`\frac{1}{2}`}, true, true},
		{"decimal with zeros", `\boxed{0.50}`, []string{"0.5"}, true, true},
		{"equivalent fraction", `\boxed{\frac{6}{8}}`, []string{`\frac{3}{4}`}, true, true},
		{"slash fraction", `\boxed{3/4}`, []string{`\frac{3}{4}`}, true, true},
		{"negative fraction inside", `\boxed{\frac{-1}{2}}`, []string{`-\frac{1}{2}`}, true, true},
		{"negative fraction outside", `\boxed{-\frac{1}{2}}`, []string{`\frac{-1}{2}`}, true, true},
		{"negative integer", `\boxed{-7}`, []string{"-7"}, true, true},
		{"negative decimal", `\boxed{-2.50}`, []string{"-5/2"}, true, true},
		{"left right tuple", `\boxed{\left(3, 4\right)}`, []string{"(3,4)"}, true, true},
		{"interval", `\boxed{\left[-1, \frac{1}{2}\right)}`, []string{"[-1,0.5)"}, true, true},
		{"set any order", `\boxed{\{3, 1, 2\}}`, []string{`\{1,2,3\}`}, true, true},
		{"degrees circ", `\boxed{45^\circ}`, []string{"45"}, true, true},
		{"degrees braced circ", `\boxed{45^{\circ}}`, []string{"45"}, true, true},
		{"degrees word", `\boxed{45 \text{ degrees}}`, []string{"45"}, true, true},
		{"unit cm", `\boxed{12\text{ cm}}`, []string{"12"}, true, true},
		{"unit square units", `\boxed{12 \text{ square units}}`, []string{"12"}, true, true},
		{"dollars", `\boxed{\$1,250}`, []string{"1250"}, true, true},
		{"thousands comma", `\boxed{1,000}`, []string{"1000"}, true, true},
		{"thousands braced comma", `\boxed{1{,}000}`, []string{"1000"}, true, true},
		{"thousands thin space", `\boxed{10\,000}`, []string{"10000"}, true, true},
		{"percent", `\boxed{50\%}`, []string{"50"}, true, true},
		{"x equals", `\boxed{x = 12}`, []string{"12"}, true, true},
		{"sum equals", `\boxed{m + n = 204}`, []string{"204"}, true, true},
		{"parenthesised", `\boxed{(204)}`, []string{"204"}, true, true},
		{"aime leading zeros", `\boxed{024}`, []string{"24"}, true, true},
		{"unicode minus", "\\boxed{−3}", []string{"-3"}, true, true},
		{"surd over number", `\boxed{\sqrt{2}/2}`, []string{`\frac{\sqrt2}{2}`}, true, true},
		{"spaces", `\boxed{ 1 2 }`, []string{"12"}, true, true},
		{"sqrt shorthand", `\boxed{2\sqrt3}`, []string{`2\sqrt{3}`}, true, true},
		{"frac of sqrt", `\boxed{\frac{\sqrt{3}}{2}}`, []string{`\dfrac{\sqrt3}{2}`}, true, true},
		{"pi", `\boxed{2\pi}`, []string{`2 \pi`}, true, true},
		{"text answer", `\boxed{\text{(C)}}`, []string{"(C)"}, true, true},
		{"second reference", `\boxed{7}`, []string{"6", "7"}, true, true},
		{"boxed reference", `\boxed{7}`, []string{`The answer is \boxed{7}.`}, true, true},
		{"fbox", `\fbox{19}`, []string{"19"}, true, true},
		{"boxed no braces", `The answer is $\boxed 19$.`, []string{"19"}, true, true},
		{"in prose", `I believe \boxed{19} is correct because the sum is 19.`, []string{"19"}, true, true},
		{"in code block", "```\n# final: \\boxed{19}\n```", []string{"19"}, true, true},
		{"last wins", `Maybe \boxed{18}? No: \boxed{19}.`, []string{"19"}, true, true},
		{"display math", `\[\boxed{19}\]`, []string{"19"}, true, true},
		{"long response", strings.Repeat("thinking... ", 2000) + `\boxed{19}`, []string{"19"}, true, true},
		{"early box long tail", `\boxed{19}` + strings.Repeat(" check", 200), []string{"19"}, true, true},

		// Wrong answers that look close.
		{"prefix number", `\boxed{12}`, []string{"121"}, true, false},
		{"extended number", `\boxed{121}`, []string{"12"}, true, false},
		{"other fraction", `\boxed{1/2}`, []string{"1/3"}, true, false},
		{"sign", `\boxed{-7}`, []string{"7"}, true, false},
		{"fraction sign", `\boxed{-\frac{1}{2}}`, []string{`\frac{1}{2}`}, true, false},
		{"rounded", `\boxed{0.33}`, []string{`\frac{1}{3}`}, true, false},
		{"percent is not a fraction", `\boxed{50\%}`, []string{"0.5"}, true, false},
		{"tuple order", `\boxed{(4, 3)}`, []string{"(3,4)"}, true, false},
		{"interval ends", `\boxed{(0, 1]}`, []string{"[0,1]"}, true, false},
		{"surd not simplified", `\boxed{\sqrt{12}}`, []string{`2\sqrt{3}`}, true, false},
		{"last wins wrong", `\boxed{19} hmm, actually \boxed{18}`, []string{"19"}, true, false},
		{"comma list not thousands", `\boxed{1,00}`, []string{"100"}, true, false},
		{"decimal digits", `\boxed{3.14}`, []string{"3.1416"}, true, false},
		{"many digits", `\boxed{1000000000000000000001}`, []string{"1000000000000000000000"}, true, false},
		{"variable", `\boxed{x}`, []string{"y"}, true, false},
		{"no references", `\boxed{1}`, nil, true, false},

		// Nothing to grade.
		{"no box", `The answer is 19.`, []string{"19"}, false, false},
		{"empty box", `\boxed{}`, []string{"19"}, false, false},
		{"unbalanced box", `\boxed{\frac{1}{2}`, []string{`\frac{1}{2}`}, false, false},
		{"cut off after good box", `\boxed{19} so finally \boxed{1`, []string{"19"}, false, false},
		{"empty response", "", []string{"19"}, false, false},
		{"box of spaces", `\boxed{ }`, []string{""}, false, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Verify(c.response, c.answers)
			if r.Found != c.found || r.Correct != c.correct {
				t.Fatalf("Verify = %+v; want found=%v correct=%v", r, c.found, c.correct)
			}
			wantReward := 0.0
			if c.correct {
				wantReward = 1
			}
			if r.Reward != wantReward {
				t.Errorf("reward %v, want %v", r.Reward, wantReward)
			}
			if r.Found && r.Normalized != Normalize(r.Extracted) {
				t.Errorf("Normalized %q, want Normalize(%q)", r.Normalized, r.Extracted)
			}
		})
	}
}

func BenchmarkVerify(b *testing.B) {
	resp := strings.Repeat("Let me think about the problem step by step. ", 400) +
		`Therefore the answer is $\boxed{\dfrac{3}{4}}$.`
	b.SetBytes(int64(len(resp)))
	for b.Loop() {
		if !Verify(resp, []string{"0.75"}).Correct {
			b.Fatal("not correct")
		}
	}
}

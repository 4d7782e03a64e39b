package searchqa

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The verifier follows Search-R1's qa_em.py so that rewards stay comparable
// with the paper: SQuAD normalisation, exact match as the reward, and
// substring match (subem) as a diagnostic. Where this file departs from it,
// the comment on the function says so and why.

// asciiPunct is Python's string.punctuation. Only ASCII punctuation is
// removed, as in the reference: dropping Unicode punctuation too (’, –, «)
// would change which answers count as correct and make our rewards
// incomparable with published numbers.
const asciiPunct = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"

// isPySpace is Python's str.isspace: Unicode White_Space plus the ASCII
// separators U+001C..U+001F, which str.split also splits on.
func isPySpace(r rune) bool {
	return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f)
}

// isPyWord is what Python's re treats as \w in a str pattern: letters,
// numbers and underscore. Go's regexp \b is ASCII-only, so it would find a
// word boundary inside "éa" and strip the "a"; Python does not.
func isPyWord(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r)
}

// Normalize applies SQuAD answer normalisation in the reference's order:
// lowercase, remove ASCII punctuation, remove the articles a/an/the where
// they are whole words, collapse runs of whitespace to one space and trim.
// Normalize(Normalize(s)) == Normalize(s).
func Normalize(s string) string {
	s = pyLower(s)
	s = strings.Map(func(r rune) rune {
		if r < 0x80 && strings.ContainsRune(asciiPunct, r) {
			return -1
		}
		return r
	}, s)
	s = removeArticles(s)
	return strings.Join(strings.FieldsFunc(s, isPySpace), " ")
}

// pyLower lowercases as Python's str.lower does, which differs from
// strings.ToLower in two places: U+0130 (İ) becomes "i" plus a combining
// dot above (U+0307), and a capital sigma that ends a word becomes final
// sigma (ς), not σ.
func pyLower(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return strings.ToLower(s)
	}
	var b strings.Builder
	b.Grow(len(s))
	for i, r := range s {
		switch r {
		case '\u0130':
			b.WriteString("i\u0307")
		case 'Σ':
			if finalSigma(s, i) {
				b.WriteRune('ς')
			} else {
				b.WriteRune('σ')
			}
		default:
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

// finalSigma is Unicode's Final_Sigma condition for the Σ at byte i: a
// cased letter comes before it and none after it, skipping case-ignorable
// characters both ways.
func finalSigma(s string, i int) bool {
	before := false
	for j := i; j > 0; {
		r, n := utf8.DecodeLastRuneInString(s[:j])
		j -= n
		if caseIgnorable(r) {
			continue
		}
		before = cased(r)
		break
	}
	if !before {
		return false
	}
	for _, r := range s[i+len("Σ"):] {
		if caseIgnorable(r) {
			continue
		}
		return !cased(r)
	}
	return true
}

func cased(r rune) bool {
	return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) ||
		unicode.Is(unicode.Other_Lowercase, r) || unicode.Is(unicode.Other_Uppercase, r)
}

// caseIgnorable is Unicode's Case_Ignorable: marks, format characters,
// modifier letters and symbols, and the apostrophes, periods and colons
// that may sit inside a word.
func caseIgnorable(r rune) bool {
	switch r {
	case '\'', '.', ':', '\u00b7', '\u0387', '\u055f', '\u05f4', '\u2018', '\u2019', '\u2024', '\u2027',
		'\ufe13', '\ufe52', '\ufe55', '\uff07', '\uff0e', '\uff1a':
		return true
	}
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk)
}

// removeArticles replaces each maximal run of word characters that is
// exactly "a", "an" or "the" with a space, which is what
// re.sub(r"\b(a|an|the)\b", " ", s) does on a lowercased str.
func removeArticles(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	start := -1 // start of the current word run, -1 outside one
	flush := func(end int) {
		switch s[start:end] {
		case "a", "an", "the":
			b.WriteByte(' ')
		default:
			b.WriteString(s[start:end])
		}
		start = -1
	}
	for i, r := range s {
		if isPyWord(r) {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			flush(i)
		}
		// pyLower has already turned invalid UTF-8 into U+FFFD, so this
		// writes back exactly what it read.
		b.WriteRune(r)
	}
	if start >= 0 {
		flush(len(s))
	}
	return b.String()
}

// ExactMatch reports whether the normalised prediction equals a normalised
// gold answer. Unlike the reference, an empty normalised prediction or gold
// never matches: a gold such as "The" would otherwise accept the empty
// answer, and under SubEM every answer.
func ExactMatch(pred string, golds []string) bool {
	np := Normalize(pred)
	if np == "" {
		return false
	}
	for _, g := range golds {
		if ng := Normalize(g); ng != "" && ng == np {
			return true
		}
	}
	return false
}

// SubEM reports whether a normalised gold answer occurs in the normalised
// prediction. As in the reference's subem_check this is a character
// substring test, not a token one: gold "1" is found in "1999".
func SubEM(pred string, golds []string) bool {
	np := Normalize(pred)
	if np == "" {
		return false
	}
	for _, g := range golds {
		if ng := Normalize(g); ng != "" && strings.Contains(np, ng) {
			return true
		}
	}
	return false
}

// F1 is the token-level F1 of the normalised prediction against the best
// gold. As in the HotpotQA evaluation, a yes/no/noanswer prediction or gold
// scores 0 unless the two are equal, so "yes it is" earns nothing against
// "yes". Empty normalised strings score 0.
func F1(pred string, golds []string) float64 {
	np := Normalize(pred)
	if np == "" {
		return 0
	}
	pt := strings.Split(np, " ")
	best := 0.0
	for _, g := range golds {
		ng := Normalize(g)
		if ng == "" {
			continue
		}
		if (isSpecial(np) || isSpecial(ng)) && np != ng {
			continue
		}
		if f := tokenF1(pt, strings.Split(ng, " ")); f > best {
			best = f
		}
	}
	return best
}

func isSpecial(s string) bool { return s == "yes" || s == "no" || s == "noanswer" }

func tokenF1(pred, gold []string) float64 {
	counts := make(map[string]int, len(gold))
	for _, t := range gold {
		counts[t]++
	}
	same := 0
	for _, t := range pred {
		if counts[t] > 0 {
			counts[t]--
			same++
		}
	}
	if same == 0 {
		return 0
	}
	p := float64(same) / float64(len(pred))
	r := float64(same) / float64(len(gold))
	return 2 * p * r / (p + r)
}

const (
	openTag  = "<answer>"
	closeTag = "</answer>"
)

// ExtractAnswer returns the trimmed text of the last closed
// <answer>...</answer> in response, and whether there is one. Tags are
// case-sensitive, as in the reference.
//
// response must be text the model wrote, not the prompt: Search-R1 scored
// the prompt and response together and so required at least two matches to
// skip the example tag in its own instructions. The episode loop here owns
// the transcript and passes only assistant text, so one match is enough and
// a prompt example can never be mistaken for an answer.
//
// "Last" means the last opening tag that some closing tag follows, ended by
// the first closing tag after it. For well-formed text this is what the
// reference's non-greedy regex returns; for nested tags
// (<answer>a <answer>b</answer> c</answer>) it yields the inner "b" where
// the regex would yield "a <answer>b", and an unclosed trailing tag from a
// truncated generation falls back to the previous complete answer.
func ExtractAnswer(response string) (string, bool) {
	lastClose := strings.LastIndex(response, closeTag)
	if lastClose < 0 {
		return "", false
	}
	open := strings.LastIndex(response[:lastClose], openTag)
	if open < 0 {
		return "", false
	}
	body := response[open+len(openTag):]
	end := strings.Index(body, closeTag)
	return strings.TrimFunc(body[:end], isPySpace), true
}

// Result is the verifier's verdict on one response.
type Result struct {
	Extracted string  // the answer text, "" when none was found
	Found     bool    // an <answer> tag pair was present
	EM        bool    // exact match after normalisation
	SubEM     bool    // a gold occurs in the normalised answer
	F1        float64 // token F1 against the best gold
	Reward    float64 // 1 when EM, else 0: the binary verifier of the paper
}

// Verify extracts the answer from a model response and scores it against
// the gold answers. A response without an answer scores 0 on everything.
func Verify(response string, golds []string) Result {
	ans, ok := ExtractAnswer(response)
	if !ok {
		return Result{}
	}
	r := Result{Extracted: ans, Found: true, EM: ExactMatch(ans, golds), SubEM: SubEM(ans, golds), F1: F1(ans, golds)}
	if r.EM {
		r.Reward = 1
	}
	return r
}

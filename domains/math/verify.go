package mathdomain

// Result is the verdict on one response.
type Result struct {
	// Extracted is the content of the last box, as written; "" if none.
	Extracted string `json:"extracted"`
	// Normalized is Normalize(Extracted), for traces and debugging.
	Normalized string `json:"normalized"`
	// Found reports a non-empty, balanced last box.
	Found bool `json:"found"`
	// Correct reports that the box is Equivalent to one of the answers.
	Correct bool `json:"correct"`
	// Reward is 1 when Correct and 0 otherwise: the binary verifier RSFT
	// accepts at > 0.5. DAPO's -1 for a wrong answer is a training choice
	// of that recipe, not of the verifier.
	Reward float64 `json:"reward"`
}

// Verify grades a response against the reference answers of a task: the
// last \boxed{} (see Extract) must be Equivalent to at least one of them.
// A reference that itself contains a box is compared by its box content,
// so MATH-style solutions work as references. The whole response is read,
// unlike verl's DAPO scorer, which looks only at its last 300 characters.
func Verify(response string, answers []string) Result {
	var r Result
	r.Extracted, r.Found = Extract(response)
	if !r.Found {
		return r
	}
	r.Normalized = Normalize(r.Extracted)
	for _, a := range answers {
		if boxed, ok := Extract(a); ok {
			a = boxed
		}
		if equivalentNormalized(r.Normalized, Normalize(a), 0) {
			r.Correct, r.Reward = true, 1
			break
		}
	}
	return r
}

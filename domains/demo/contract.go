package demo

import (
	"github.com/whalerun/whale/harness"
)

const contractIntro = `

Domain: demo, single-digit arithmetic ("What is 7 * 8?") for whale's
built-in local model. The answer is a non-negative integer; the verifier
compares the answer action's text, trimmed, as an integer with the
reference ("08" equals "8", "8." does not); the reward is 1 or 0. There
are no tools. The model was pretrained to write <answer>N</answer> when a
message it sees asks for that format, and mostly prose ("The result is N.")
otherwise.`

// Contract is the demo domain's harness contract: the base contract with
// h0's budgets (two turns, no format retry, 48 tokens a reply) and two
// switches the mutate proposer can flip, each a different mechanism that
// recovers the answers h0's strict tag parser loses.
func Contract() *harness.Contract {
	base := harness.Base()
	return base.Extend(harness.Contract{
		Name:  "demo",
		Intro: base.Intro + contractIntro,
		Constants: []harness.ConstSpec{
			base.WithDefault("SYSTEM_PROMPT", "Solve the arithmetic problem."),
			base.WithDefault("MAX_TURNS", 2),
			base.WithDefault("FORMAT_RETRIES", 0),
			base.WithDefault("MAX_TOKENS", 48),
			{
				Name: "ANSWER_CUE", Type: harness.TypeBool, Default: false,
				Doc: "Whether the first user message ends with the line `" + AnswerCue + "`, which asks the model " +
					"for the tagged answer format parse_action reads.",
			},
			{
				Name: "LENIENT_PARSE", Type: harness.TypeBool, Default: false,
				Doc: "Whether parse_action, finding no <answer></answer> tags, takes the last integer of the reply " +
					"as the answer instead of rejecting the reply.",
			},
		},
	})
}

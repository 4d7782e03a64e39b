package mathdomain

import "github.com/whalerun/whale/harness"

const contractIntro = `

Domain: competition math (DAPO-Math-17K training, AIME tests). The verifier
takes the last ` + "`\\boxed{...}`" + ` of the final answer, normalises it and compares
it with the reference; the reward is 1 or 0. When CODE_TOOL is on, the
episode loop (never the harness) runs Python the model asks for and passes
its output to format_tool_result; parse_action asks for a run by returning
` + "`{\"kind\": \"tool\", \"tool\": \"python\", \"input\": CODE}`" + `. A harness may instead
offer the native ` + "`code_interpreter`" + ` tool (` + "`TOOLS = [\"code_interpreter\"]`" + `),
which the model calls with ` + "`{\"code\": CODE}`" + `; both run the same sandbox. The helpers below
read answers the way the verifier does, so a harness can tell whether a
reply has a gradable answer; they never see the reference.`

// CodeTool is the native code tool of ReTool-style harnesses (the paper's
// math h0): a Python program, run in the sandbox, whose output comes back.
var CodeTool = harness.ToolSpec{
	Name:        ToolCode,
	Description: "Run a Python program and return what it prints (stdout, then stderr). Use print() to see values.",
	Parameters: map[string]any{
		"type": "object",
		"properties": map[string]any{
			"code": map[string]any{"type": "string", "description": "The Python program to run."},
		},
		"required": []any{"code"},
	},
}

// Contract is the math domain's harness contract: the base contract with
// the paper's math h0 turn budget (2: one code run, then the answer), the
// code-tool constants, and the verifier's own answer extraction and
// normalisation as read-only helpers.
func Contract() *harness.Contract {
	base := harness.Base()
	return base.Extend(harness.Contract{
		Name:  "math",
		Intro: base.Intro + contractIntro,
		Constants: []harness.ConstSpec{
			base.WithDefault("MAX_TURNS", 2),
			{
				Name: "CODE_TOOL", Type: harness.TypeBool, Default: true,
				Doc: "Whether the model may run Python: when True the loop runs the code of each " +
					"`{\"kind\": \"tool\", \"tool\": \"python\", \"input\": CODE}` action and of each native " +
					"`code_interpreter` call in a sandbox (each run costs a turn); when False such an action is rejected as illegal.",
			},
			{
				Name: "MAX_OUTPUT_CHARS", Type: harness.TypeInt, Default: 2000, Min: harness.Bound(100), Max: harness.Bound(100_000),
				Doc: "Most characters of a code run's output (stdout, then stderr) passed to format_tool_result; " +
					"longer output is cut and the result says so.",
			},
		},
		Tools: []harness.ToolSpec{CodeTool},
		Helpers: map[string]harness.Builtin{
			"extract_boxed": {
				Params:  []string{"text"},
				Returns: "str or None",
				Doc: "The content of the last `\\boxed{...}` (or `\\fbox{...}`) of `text`, trimmed, exactly as the " +
					"verifier reads it; None when there is none or the last one is empty or unclosed (an earlier box " +
					"is not used then).",
				Fn: harness.OptionalStringFunc("text", Extract),
			},
			"normalize_answer": {
				Params:  []string{"s"},
				Returns: "str",
				Doc: "The verifier's normalisation of an answer (units, `\\text{}`, spacing, `\\dfrac`→`\\frac`, " +
					"canonical numbers, ...): two answers the verifier's exact comparison accepts as equal usually " +
					"normalise to the same string. Nothing is evaluated.",
				Fn: harness.StringFunc("s", Normalize),
			},
		},
	})
}

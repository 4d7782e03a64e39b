package searchqa

import "github.com/whalerun/whale/harness"

const contractIntro = `

Domain: search question answering (the Search-R1 setup). The model may
search a Wikipedia passage corpus and must end with its answer; the
verifier takes the text of the last closed ` + "`<answer>...</answer>`" + ` of the
reply and compares it with the gold answers after SQuAD normalisation
(reward 1 on an exact match, else 0). Retrieval is done by the episode loop,
never by the harness: parse_action asks for a search by returning
` + "`{\"kind\": \"tool\", \"tool\": \"search\", \"input\": QUERY}`" + ` and format_tool_result
receives the passages. A harness may instead offer the native ` + "`search`" + ` tool
(` + "`TOOLS = [\"search\"]`" + `): the model calls it with a list of queries, and
format_tool_result gets one result per call. The helpers below read answers the way the verifier
does; they never see the gold answers.`

// SearchTool is the native retrieval tool, shaped like the search tool of
// verl's Search-R1 recipe that the paper's reference builds on: a list of
// queries, each answered with the top TOPK passages.
var SearchTool = harness.ToolSpec{
	Name:        ToolSearch,
	Description: "Search a Wikipedia passage corpus. Returns the most relevant passages for each query.",
	Parameters: map[string]any{
		"type": "object",
		"properties": map[string]any{
			"query_list": map[string]any{
				"type":        "array",
				"items":       map[string]any{"type": "string"},
				"minItems":    1,
				"maxItems":    maxQueries,
				"description": "Fully formed search queries; each gets its own results.",
			},
		},
		"required": []any{"query_list"},
	},
}

// Contract is the search-QA domain's harness contract: the base contract
// with the paper's h0 turn budget (2), the retrieval parameters, and the
// verifier's own answer extraction and normalisation as read-only helpers.
func Contract() *harness.Contract {
	base := harness.Base()
	return base.Extend(harness.Contract{
		Name:  "searchqa",
		Intro: base.Intro + contractIntro,
		Constants: []harness.ConstSpec{
			base.WithDefault("MAX_TURNS", 2),
			{
				Name: "TOPK", Type: harness.TypeInt, Default: 3, Min: harness.Bound(1), Max: harness.Bound(50),
				Doc: "How many passages each search returns, best first.",
			},
			{
				Name: "MAX_DOC_CHARS", Type: harness.TypeInt, Default: 2000, Min: harness.Bound(50), Max: harness.Bound(100_000),
				Doc: "Most characters of each passage (title line first) passed to format_tool_result; longer ones are cut.",
			},
		},
		Tools: []harness.ToolSpec{SearchTool},
		Helpers: map[string]harness.Builtin{
			"extract_answer": {
				Params:  []string{"text"},
				Returns: "str or None",
				Doc: "The text of the last closed `<answer>...</answer>` in `text`, exactly as the verifier reads it " +
					"(an unclosed trailing tag falls back to the previous complete answer); None when there is none.",
				Fn: harness.OptionalStringFunc("text", ExtractAnswer),
			},
			"normalize_answer": {
				Params:  []string{"s"},
				Returns: "str",
				Doc: "SQuAD normalisation as the verifier applies it: lower case, ASCII punctuation removed, the " +
					"articles a/an/the removed, whitespace collapsed. Two answers match exactly when their " +
					"normalisations are equal.",
				Fn: harness.StringFunc("s", Normalize),
			},
		},
	})
}

package searchqa

import (
	"context"
	_ "embed"
	"fmt"
	"strings"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/schemas"
)

// ToolSearch is the name of the retrieval tool a harness asks for.
const ToolSearch = "search"

// baseline is h0, the paper's: a minimal prompt, the native search tool,
// the top-1 passage cut to about 200 tokens, two turns (see h0.star).
//
//go:embed h0.star
var baseline []byte

// tagsHarness is h0-tags: the Search-R1 prompt and tags (<search>,
// <answer>), the top 3 passages, two turns: whale's h0 before the paper's
// native-tool one.
//
//go:embed h0-tags.star
var tagsHarness []byte

// localHarness is h0-local: the search demo's starting harness for the
// built-in byte model (short tool, top-1 sentence; see the file).
//
//go:embed h0-local.star
var localHarness []byte

// maxQueryBytes bounds a search query: a query is a line of keywords, and
// a model that pastes its whole reasoning into <search> must not send
// megabytes to the retriever.
const maxQueryBytes = 4096

// maxQueries bounds the queries of one native search call.
const maxQueries = 8

// Domain is the search-QA domain for the episode loop. Its environments
// run searches through the Retriever it was made with.
type Domain struct {
	retriever Retriever
}

// NewDomain returns the search-QA domain. r may be nil: the domain still
// plays (a harness that answers without searching works), and each search
// gets the tool error "no retriever configured".
func NewDomain(r Retriever) *Domain { return &Domain{retriever: r} }

var _ episode.Domain = (*Domain)(nil)

// Name is "searchqa".
func (d *Domain) Name() string { return "searchqa" }

// Contract is the domain's harness contract, Contract().
func (d *Domain) Contract() *harness.Contract { return Contract() }

// Baseline is the source of h0.
func (d *Domain) Baseline() []byte { return append([]byte(nil), baseline...) }

// Harnesses are the domain's built-in harnesses by name, the names an
// experiment's harness.initial may give: "h0" (Baseline, the paper's),
// "h0-tags" and "h0-local" (the search demo's, for the built-in model).
func Harnesses() map[string][]byte {
	return map[string][]byte{
		"h0":       append([]byte(nil), baseline...),
		"h0-tags":  append([]byte(nil), tagsHarness...),
		"h0-local": append([]byte(nil), localHarness...),
	}
}

// NewEnv makes the environment of one question. TOPK and MAX_DOC_CHARS come
// from h (the contract's defaults when h is nil).
func (d *Domain) NewEnv(_ context.Context, task schemas.Task, h *harness.Harness) (episode.Env, error) {
	if strings.TrimSpace(task.Question) == "" {
		return nil, fmt.Errorf("searchqa task %q: empty question", task.ID)
	}
	if len(task.Answers) == 0 {
		return nil, fmt.Errorf("searchqa task %q: no gold answers", task.ID)
	}
	topk, maxChars, err := retrievalParams(h)
	if err != nil {
		return nil, fmt.Errorf("searchqa task %q: %w", task.ID, err)
	}
	return &Env{task: task, retriever: d.retriever, topk: topk, maxDocChars: maxChars}, nil
}

func retrievalParams(h *harness.Harness) (topk, maxChars int, err error) {
	c := Contract()
	if h == nil {
		tk, _ := c.Const("TOPK")
		mc, _ := c.Const("MAX_DOC_CHARS")
		return tk.Default.(int), mc.Default.(int), nil
	}
	// Harness getters panic on a constant their contract lacks: a harness
	// loaded for another domain is the caller's mistake, reported here.
	for _, name := range []string{"TOPK", "MAX_DOC_CHARS"} {
		if _, ok := h.Contract().Const(name); !ok {
			return 0, 0, fmt.Errorf("harness %s was loaded with contract %q, which has no %s: load it with the searchqa contract",
				h.Filename(), h.Contract().Name, name)
		}
	}
	return h.Int("TOPK"), h.Int("MAX_DOC_CHARS"), nil
}

// Env is one search-QA episode. It is not safe for concurrent use.
type Env struct {
	task        schemas.Task
	retriever   Retriever
	topk        int
	maxDocChars int
}

// Reset returns {"question": q}.
func (e *Env) Reset(context.Context) (map[string]any, error) {
	return map[string]any{"question": e.task.Question}, nil
}

// Step runs a search or grades an answer. A search of one query (a tag's
// text, or a native call's query_list of one) has the result
// {"query", "passages": [{id, title, contents, score}], "text"} where
// contents is cut to MAX_DOC_CHARS characters and text renders the
// passages as Search-R1 does ("Doc 1(Title: T) body", one a line); a
// search of several has {"queries", "results": [one such dict each],
// "text": each query's line "Query i: q" and its text, in order}.
// An answer ends the episode with reward 1 on an exact match (SQuAD
// normalisation) with a gold answer, else 0.
func (e *Env) Step(ctx context.Context, a harness.Action) (episode.Step, error) {
	switch a.Kind {
	case "answer":
		correct := ExactMatch(a.Answer, e.task.Answers)
		out := episode.Outcome{Answer: a.Answer, Correct: correct}
		if correct {
			out.Reward = 1
		}
		return episode.Step{Done: true, Outcome: out}, nil
	case "tool":
		if a.Tool != ToolSearch {
			return episode.Step{Illegal: fmt.Sprintf("unknown tool %q: the only tool is %q", a.Tool, ToolSearch)}, nil
		}
		return e.search(ctx, queries(a))
	case "move":
		return episode.Step{Illegal: "there are no moves in search QA: search or answer"}, nil
	}
	return episode.Step{}, fmt.Errorf("searchqa task %q: step with action kind %q", e.task.ID, a.Kind)
}

// queries are a search action's queries: the tag's text (Input), or a
// native call's query_list (or a single "query" string, for a harness
// that declares its own parameters).
func queries(a harness.Action) []string {
	if a.Input != "" {
		return []string{a.Input}
	}
	if list, ok := a.Args["query_list"].([]any); ok {
		out := make([]string, 0, len(list))
		for _, q := range list {
			s, _ := q.(string)
			out = append(out, s)
		}
		return out
	}
	if s, ok := a.Args["query"].(string); ok {
		return []string{s}
	}
	return nil
}

func (e *Env) search(ctx context.Context, queries []string) (episode.Step, error) {
	switch {
	case e.retriever == nil:
		return episode.Step{ToolError: "no retriever configured"}, nil
	case len(queries) == 0:
		return episode.Step{ToolError: "no search query"}, nil
	case len(queries) > maxQueries:
		return episode.Step{ToolError: fmt.Sprintf("%d queries in one search, more than the limit of %d", len(queries), maxQueries)}, nil
	}
	for i, q := range queries {
		queries[i] = strings.TrimSpace(q)
		switch {
		case queries[i] == "":
			return episode.Step{ToolError: "empty search query"}, nil
		case len(queries[i]) > maxQueryBytes:
			return episode.Step{ToolError: fmt.Sprintf("search query of %d bytes, more than the limit of %d", len(queries[i]), maxQueryBytes)}, nil
		}
	}
	res, err := e.retriever.Retrieve(ctx, queries, e.topk)
	if err != nil {
		if ctx.Err() != nil {
			return episode.Step{}, fmt.Errorf("searchqa task %q: search: %w", e.task.ID, err)
		}
		return episode.Step{ToolError: "search failed: " + err.Error()}, nil
	}
	if len(res) != len(queries) {
		return episode.Step{ToolError: fmt.Sprintf("search failed: the retriever answered %d result lists for %d queries", len(res), len(queries))}, nil
	}
	if len(queries) == 1 {
		return episode.Step{ToolResult: SearchResult(queries[0], res[0], e.topk, e.maxDocChars)}, nil
	}
	results := make([]any, len(queries))
	var text strings.Builder
	for i, q := range queries {
		r := SearchResult(q, res[i], e.topk, e.maxDocChars)
		results[i] = r
		fmt.Fprintf(&text, "Query %d: %s\n%s", i+1, q, r["text"])
	}
	return episode.Step{ToolResult: map[string]any{"queries": anyList(queries), "results": results, "text": text.String()}}, nil
}

func anyList(s []string) []any {
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// SearchResult is the tool result of one search as format_tool_result
// receives it: at most topk passages, each one's contents (title line
// first) cut to maxDocChars characters, and the Search-R1 rendering in
// "text".
func SearchResult(query string, passages []Passage, topk, maxDocChars int) map[string]any {
	if len(passages) > topk {
		passages = passages[:topk]
	}
	list := make([]any, len(passages))
	var text strings.Builder
	for i, p := range passages {
		contents, _ := harness.CutChars(p.Contents, maxDocChars)
		title := p.Title
		if title == "" {
			title = TitleOf(contents)
		}
		list[i] = map[string]any{"id": p.ID, "title": title, "contents": contents, "score": p.Score}
		// Search-R1's _passages2string: the title line, then the body.
		_, body, _ := strings.Cut(contents, "\n")
		fmt.Fprintf(&text, "Doc %d(Title: %s) %s\n", i+1, title, body)
	}
	return map[string]any{"query": query, "passages": list, "text": text.String()}
}

// Final scores an episode that ended without an answer: reward 0.
func (e *Env) Final(context.Context) episode.Outcome { return episode.Outcome{} }

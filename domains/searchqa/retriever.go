package searchqa

import (
	"context"
	"strings"
)

// Passage is one retrieved document. Contents is the corpus text as stored,
// whose first line is the title (Search-R1's layout); Title is that line
// without the quotes wiki-18 puts around it.
type Passage struct {
	ID       string  `json:"id"`
	Title    string  `json:"title"`
	Contents string  `json:"contents"`
	Score    float64 `json:"score"`
}

// Text is the passage body: Contents after its first line.
func (p Passage) Text() string {
	_, body, _ := strings.Cut(p.Contents, "\n")
	return body
}

// TitleOf returns the title of a corpus text: its first line, trimmed of
// spaces and of the double quotes around titles in Search-R1's wiki-18
// corpus ("\"Aaron\"\nAaron is ...").
func TitleOf(contents string) string {
	first, _, _ := strings.Cut(contents, "\n")
	return strings.Trim(strings.TrimSpace(first), "\"")
}

// Retriever answers a batch of queries with up to topk passages each, best
// first. The result has one slice per query, in query order; a query that
// matches nothing gets an empty slice, not an error. topk must be at least 1.
// Implementations are safe for concurrent use.
type Retriever interface {
	Retrieve(ctx context.Context, queries []string, topk int) ([][]Passage, error)
}

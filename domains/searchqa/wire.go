package searchqa

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// The Search-R1 retrieval API:
//
//	POST /retrieve {"queries": ["q1", ...], "topk": 3, "return_scores": true}
//	-> {"result": [[{"document": {"id": "12", "contents": "\"Title\"\ntext"}, "score": 7.1}, ...], ...]}
//
// Without return_scores each result item is the document itself. Forks send
// topk as a list with one entry per query; both forms are accepted here.

type wireRequest struct {
	Queries      []string `json:"queries"`
	TopK         int      `json:"topk"`
	ReturnScores bool     `json:"return_scores"`
}

type wireDoc struct {
	ID       string `json:"id"`
	Contents string `json:"contents"`
}

type wireScored struct {
	Document wireDoc `json:"document"`
	Score    float64 `json:"score"`
}

// decodeResult parses a /retrieve response body for n queries.
func decodeResult(body []byte, n int) ([][]Passage, error) {
	var top struct {
		Result []json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, fmt.Errorf("response is not JSON of the form {\"result\": [...]}: %w", err)
	}
	if top.Result == nil {
		return nil, fmt.Errorf("response has no \"result\" list")
	}
	if len(top.Result) != n {
		return nil, fmt.Errorf("response has %d result lists for %d queries", len(top.Result), n)
	}
	out := make([][]Passage, n)
	for i, raw := range top.Result {
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, fmt.Errorf("result %d: want a list of documents: %w", i, err)
		}
		ps := make([]Passage, 0, len(items))
		for j, item := range items {
			p, err := decodeItem(item)
			if err != nil {
				return nil, fmt.Errorf("result %d item %d: %w", i, j, err)
			}
			ps = append(ps, p)
		}
		out[i] = ps
	}
	return out, nil
}

// decodeItem accepts {"document": doc, "score": s} or a bare doc.
func decodeItem(raw json.RawMessage) (Passage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return Passage{}, fmt.Errorf("want a JSON object: %w", err)
	}
	var score float64
	if doc, ok := obj["document"]; ok {
		if s, ok := obj["score"]; ok && !isNull(s) {
			if err := json.Unmarshal(s, &score); err != nil {
				return Passage{}, fmt.Errorf("field \"score\": want a number: %w", err)
			}
		}
		obj = nil
		if err := json.Unmarshal(doc, &obj); err != nil {
			return Passage{}, fmt.Errorf("field \"document\": want a JSON object: %w", err)
		}
	}
	p, err := docFields(obj)
	p.Score = score
	return p, err
}

// docFields reads a corpus document: id (string or number, may be absent in
// Search-R1's BM25 server), and contents, or else title and text as some
// corpora store them.
func docFields(obj map[string]json.RawMessage) (Passage, error) {
	var p Passage
	if raw, ok := obj["id"]; ok && !isNull(raw) {
		id, err := stringOrNumber(raw)
		if err != nil {
			return p, fmt.Errorf("field \"id\": %w", err)
		}
		p.ID = id
	}
	var title, text string
	for name, dst := range map[string]*string{"contents": &p.Contents, "title": &title, "text": &text} {
		if raw, ok := obj[name]; ok && !isNull(raw) {
			if err := json.Unmarshal(raw, dst); err != nil {
				return p, fmt.Errorf("field %q: want a string: %w", name, err)
			}
		}
	}
	if _, ok := obj["contents"]; !ok {
		if _, ok := obj["text"]; !ok {
			return p, fmt.Errorf("document has neither \"contents\" nor \"text\"")
		}
		p.Contents = text
		if title != "" {
			p.Contents = title + "\n" + text
		}
	}
	p.Title = title
	if p.Title == "" {
		p.Title = TitleOf(p.Contents)
	}
	return p, nil
}

func isNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

func stringOrNumber(raw json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var n json.Number
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&n); err != nil {
		return "", fmt.Errorf("want a string or a number, got %s", truncate(string(raw), 40))
	}
	if i, err := strconv.ParseInt(n.String(), 10, 64); err == nil {
		return strconv.FormatInt(i, 10), nil
	}
	return n.String(), nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}

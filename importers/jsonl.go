package importers

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/whalerun/whale/schemas"
)

// Field aliases accepted by JSONL, in order of preference. The first one
// present is used; the others are kept in meta.
var (
	questionFields = []string{"question", "prompt", "problem"}
	answerFields   = []string{"answers", "answer", "golden_answers", "reward_model"}
)

// JSONL reads one JSON object per line (blank lines are skipped) and calls fn
// with each task. Fields:
//
//   - id: string or number; default "<file stem>-<line>" (tasks.jsonl line 7
//     → "tasks-7").
//   - question, or else prompt, or else problem: a string; prompt may also be
//     a chat list [{"role", "content"}], whose last user message is the
//     question (the list is kept in meta as "prompt").
//   - answers (list), or else answer (string, number or list), or else
//     golden_answers (Search-R1), or else reward_model.ground_truth (verl:
//     string, number, list or {"target": list}). Numbers become their
//     JSON text.
//   - split, domain: strings; default Options.Split/Options.Domain.
//   - meta: an object. Every other field is added to meta under its own
//     name, unless meta already has that key.
func JSONL(ctx context.Context, r io.Reader, name string, opts Options, fn func(schemas.Task) error) error {
	maxLine := opts.maxLine()
	br := bufio.NewReaderSize(r, 64<<10)
	var buf []byte
	prefix := stem(name)
	for lineNo := 1; ; lineNo++ {
		if lineNo%checkEvery == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("%s:%d: %w", name, lineNo, err)
			}
		}
		buf = buf[:0]
		eof := false
		for {
			chunk, err := br.ReadSlice('\n')
			if len(buf)+len(chunk) > maxLine {
				return lineErr(name, lineNo, "line is longer than %d bytes, the most one task may take (is the file what it should be?)", maxLine)
			}
			buf = append(buf, chunk...)
			if errors.Is(err, bufio.ErrBufferFull) {
				continue
			}
			if errors.Is(err, io.EOF) {
				eof = true
			} else if err != nil {
				return readErr(name, lineNo, err)
			}
			break
		}
		line := buf
		if lineNo == 1 {
			line = bytes.TrimPrefix(line, utf8BOM)
		}
		if off := badUTF8(line); off >= 0 {
			e := lineErr(name, lineNo, "%s", utf8Msg(line[off], off, "line"))
			e.Col = off + 1
			return e
		}
		trimmed := bytes.TrimLeft(line, " \t\r\n")
		// Columns are reported against the line as written.
		indent := len(buf) - len(trimmed)
		line = bytes.TrimRight(trimmed, " \t\r\n")
		if len(line) > 0 {
			task, perr := parseJSONLTask(line, name, lineNo, prefix, opts)
			if perr != nil {
				if perr.Col > 0 {
					perr.Col += indent
				}
				return perr
			}
			if err := fn(task); err != nil {
				return callbackErr(name, lineNo, -1, err)
			}
		}
		if eof {
			return nil
		}
	}
}

func parseJSONLTask(line []byte, name string, lineNo int, prefix string, opts Options) (schemas.Task, *Error) {
	var t schemas.Task
	if line[0] != '{' {
		if !json.Valid(line) {
			return t, jsonSyntaxErr(line, name, lineNo)
		}
		return t, lineErr(name, lineNo, "expected a JSON object, found %s", rawKind(line))
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(line, &obj); err != nil {
		return t, jsonSyntaxErr(line, name, lineNo)
	}
	// JSON null means absent for every field.
	for k, v := range obj {
		if rawKind(v) == "null" {
			delete(obj, k)
		}
	}
	used := map[string]bool{}

	t.ID = fmt.Sprintf("%s-%d", prefix, lineNo)
	if raw, ok := obj["id"]; ok {
		used["id"] = true
		switch rawKind(raw) {
		case "string":
			var s string
			_ = json.Unmarshal(raw, &s)
			if strings.TrimSpace(s) == "" {
				return t, fieldErr(name, lineNo, "id", "is empty")
			}
			t.ID = s
		case "number":
			t.ID = string(raw)
		default:
			return t, fieldErr(name, lineNo, "id", "expected a string or number, found %s", rawKind(raw))
		}
	}

	var keepPrompt json.RawMessage
	qField := firstPresent(obj, questionFields)
	if qField == "" {
		return t, lineErr(name, lineNo, "missing field \"question\" (or \"prompt\", \"problem\")")
	}
	used[qField] = true
	raw := obj[qField]
	switch rawKind(raw) {
	case "string":
		_ = json.Unmarshal(raw, &t.Question)
	case "array":
		if qField != "prompt" {
			return t, fieldErr(name, lineNo, qField, "expected a string, found array")
		}
		q, err := lastUserMessage(raw)
		if err != "" {
			return t, fieldErr(name, lineNo, qField, "%s", err)
		}
		t.Question = q
		keepPrompt = raw
	default:
		return t, fieldErr(name, lineNo, qField, "expected a string, found %s", rawKind(raw))
	}
	if strings.TrimSpace(t.Question) == "" {
		return t, fieldErr(name, lineNo, qField, "is empty")
	}

	aField := firstPresent(obj, answerFields)
	if aField == "" {
		return t, lineErr(name, lineNo, "missing field \"answers\" (or \"answer\", \"golden_answers\", \"reward_model\")")
	}
	used[aField] = true
	answers, aerr := jsonAnswers(obj[aField], aField)
	if aerr != "" {
		return t, fieldErr(name, lineNo, aField, "%s", aerr)
	}
	t.Answers = answers

	for _, f := range []struct {
		key      string
		dst      *string
		fallback string
	}{{"split", &t.Split, opts.Split}, {"domain", &t.Domain, opts.Domain}} {
		*f.dst = f.fallback
		raw, ok := obj[f.key]
		if !ok {
			continue
		}
		used[f.key] = true
		if rawKind(raw) != "string" {
			return t, fieldErr(name, lineNo, f.key, "expected a string, found %s", rawKind(raw))
		}
		_ = json.Unmarshal(raw, f.dst)
	}
	if t.Domain == "" {
		return t, lineErr(name, lineNo, "missing field \"domain\" and no domain given for the import")
	}
	if msg := opts.unknownDomain(t.Domain); msg != "" {
		if used["domain"] {
			return t, fieldErr(name, lineNo, "domain", "%s", msg)
		}
		return t, lineErr(name, lineNo, "the import's domain: %s", msg)
	}

	meta := map[string]json.RawMessage{}
	if raw, ok := obj["meta"]; ok {
		used["meta"] = true
		if rawKind(raw) != "object" {
			return t, fieldErr(name, lineNo, "meta", "expected an object, found %s", rawKind(raw))
		}
		_ = json.Unmarshal(raw, &meta)
	}
	if keepPrompt != nil {
		if _, taken := meta["prompt"]; !taken {
			meta["prompt"] = keepPrompt
		}
	}
	for k, v := range obj {
		if _, taken := meta[k]; !used[k] && !taken {
			meta[k] = v
		}
	}
	m, err := json.Marshal(meta)
	if err != nil {
		return t, lineErr(name, lineNo, "encode meta: %v", err)
	}
	t.Meta = string(m)
	return t, nil
}

func jsonSyntaxErr(line []byte, name string, lineNo int) *Error {
	var v any
	err := json.Unmarshal(line, &v)
	e := lineErr(name, lineNo, "invalid JSON: %v", err)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		e.Col = int(se.Offset)
	}
	e.Err = err
	return e
}

func firstPresent(obj map[string]json.RawMessage, names []string) string {
	for _, n := range names {
		if _, ok := obj[n]; ok {
			return n
		}
	}
	return ""
}

// rawKind names the JSON type of a valid raw value.
func rawKind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// jsonAnswers reads the answer field; the message is "" on success.
func jsonAnswers(raw json.RawMessage, field string) ([]string, string) {
	if field == "reward_model" {
		var rm map[string]json.RawMessage
		if rawKind(raw) != "object" || json.Unmarshal(raw, &rm) != nil {
			return nil, "expected an object with ground_truth, found " + rawKind(raw)
		}
		gt, ok := rm["ground_truth"]
		if !ok || rawKind(gt) == "null" {
			return nil, "missing ground_truth"
		}
		if rawKind(gt) == "object" {
			var target map[string]json.RawMessage
			_ = json.Unmarshal(gt, &target)
			tg, ok := target["target"]
			if !ok {
				return nil, "ground_truth: expected a string, list or {\"target\": [...]}, found an object without target"
			}
			gt = tg
		}
		raw = gt
	}
	var items []json.RawMessage
	switch k := rawKind(raw); k {
	case "array":
		_ = json.Unmarshal(raw, &items)
	case "string", "number":
		if field == "answers" || field == "golden_answers" {
			return nil, "expected a list of strings, found " + k
		}
		items = []json.RawMessage{raw}
	default:
		return nil, "expected a string, number or list, found " + k
	}
	if len(items) == 0 {
		return nil, "has no answers"
	}
	out := make([]string, 0, len(items))
	for i, item := range items {
		switch k := rawKind(item); k {
		case "string":
			var s string
			_ = json.Unmarshal(item, &s)
			if strings.TrimSpace(s) == "" {
				return nil, fmt.Sprintf("item %d is empty", i)
			}
			out = append(out, s)
		case "number":
			out = append(out, string(bytes.TrimSpace(item)))
		default:
			return nil, fmt.Sprintf("item %d: expected a string or number, found %s", i, k)
		}
	}
	return out, ""
}

// lastUserMessage returns the content of the last user message of a chat
// list; the message is "" on success.
func lastUserMessage(raw json.RawMessage) (string, string) {
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return "", "expected a list of {\"role\", \"content\"} messages"
	}
	for i, m := range slices.Backward(msgs) {
		var role string
		if json.Unmarshal(m["role"], &role) != nil || role != "user" {
			continue
		}
		var content string
		if rawKind(m["content"]) != "string" || json.Unmarshal(m["content"], &content) != nil {
			return "", fmt.Sprintf("message %d: content: expected a string, found %s", i, rawKind(m["content"]))
		}
		return content, ""
	}
	return "", "no message with role \"user\""
}

// JSONLLine is t as one line JSONL reads back to t: id, domain, split,
// question, answers and meta (when set, a JSON object), then "\n". The
// demo worlds write their task files with it.
func JSONLLine(t schemas.Task) ([]byte, error) {
	line := map[string]any{"id": t.ID, "domain": t.Domain, "split": t.Split, "question": t.Question, "answers": t.Answers}
	if t.Meta != "" {
		line["meta"] = json.RawMessage(t.Meta)
	}
	b, err := json.Marshal(line)
	if err != nil {
		return nil, fmt.Errorf("task %s as JSONL: %w", t.ID, err)
	}
	return append(b, '\n'), nil
}

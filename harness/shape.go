package harness

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// Shape describes and validates a Go value converted from Starlark (see
// FromStarlark: nil, bool, int64, float64, string, []any, map[string]any).
// Hook results and constants are validated against their shape; String is
// what Contract.Doc prints. Domains may implement their own.
type Shape interface {
	// Validate returns nil when v conforms. path names the value in
	// messages ("result", "result[2].role").
	Validate(v any, path string) error
	String() string
}

type kindShape struct {
	name  string
	check func(any) bool
}

func (s kindShape) Validate(v any, path string) error {
	if !s.check(v) {
		return fmt.Errorf("%s: want %s, got %s", path, s.name, describe(v))
	}
	return nil
}

func (s kindShape) String() string { return s.name }

// Basic shapes.
var (
	AnyShape    Shape = kindShape{"any", func(any) bool { return true }}
	StringShape Shape = kindShape{"string", func(v any) bool { _, ok := v.(string); return ok }}
	IntShape    Shape = kindShape{"int", func(v any) bool { _, ok := v.(int64); return ok }}
	// FloatShape accepts ints too, as Python code mixes them freely.
	FloatShape Shape = kindShape{"float", func(v any) bool {
		switch v.(type) {
		case float64, int64:
			return true
		}
		return false
	}}
	BoolShape Shape = kindShape{"bool", func(v any) bool { _, ok := v.(bool); return ok }}
	NoneShape Shape = kindShape{"None", func(v any) bool { return v == nil }}
	DictShape Shape = kindShape{"dict", func(v any) bool { _, ok := v.(map[string]any); return ok }}
	// NonEmptyStringShape is a string with at least one byte (a stop
	// sequence: servers refuse an empty one).
	NonEmptyStringShape Shape = kindShape{"non-empty string", func(v any) bool { s, ok := v.(string); return ok && s != "" }}
	ListShape           Shape = kindShape{"list", func(v any) bool { _, ok := v.([]any); return ok }}
)

// ListOf is a list whose elements all have shape Elem and whose length is
// within [Min, Max] (Max 0: unbounded).
type ListOf struct {
	Elem     Shape
	Min, Max int
}

func (s ListOf) Validate(v any, path string) error {
	l, ok := v.([]any)
	if !ok {
		return fmt.Errorf("%s: want %s, got %s", path, s, describe(v))
	}
	if len(l) < s.Min {
		return fmt.Errorf("%s: want at least %d elements, got %d", path, s.Min, len(l))
	}
	if s.Max > 0 && len(l) > s.Max {
		return fmt.Errorf("%s: want at most %d elements, got %d", path, s.Max, len(l))
	}
	for i, e := range l {
		// The element's path is spelled only once it failed: building it
		// for every element cost more than the check itself.
		if s.Elem.Validate(e, path) != nil {
			return s.Elem.Validate(e, fmt.Sprintf("%s[%d]", path, i))
		}
	}
	return nil
}

func (s ListOf) String() string {
	if s.Min > 0 {
		return fmt.Sprintf("non-empty list of %s", s.Elem)
	}
	return fmt.Sprintf("list of %s", s.Elem)
}

// DictOf is a dict with string keys whose values all have shape Elem.
type DictOf struct{ Elem Shape }

func (s DictOf) Validate(v any, path string) error {
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: want %s, got %s", path, s, describe(v))
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if s.Elem.Validate(m[k], path) != nil { // see ListOf.Validate
			return s.Elem.Validate(m[k], fmt.Sprintf("%s[%q]", path, k))
		}
	}
	return nil
}

func (s DictOf) String() string { return fmt.Sprintf("dict of string to %s", s.Elem) }

// Field is one key of a Record.
type Field struct {
	Name     string
	Shape    Shape
	Optional bool
}

// Record is a dict with known keys. A closed record (Open false) rejects
// keys it does not name, which catches typos such as "contnet".
type Record struct {
	Name   string // how the doc refers to it, e.g. "message"; may be empty
	Fields []Field
	Open   bool
}

func (s Record) Validate(v any, path string) error {
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: want %s, got %s", path, s, describe(v))
	}
	present := 0
	for _, f := range s.Fields {
		fv, ok := m[f.Name]
		if !ok {
			if f.Optional {
				continue
			}
			return fmt.Errorf("%s: missing key %q (want %s)", path, f.Name, s.describeKeys())
		}
		present++
		if f.Shape.Validate(fv, path) != nil { // see ListOf.Validate
			return f.Shape.Validate(fv, fmt.Sprintf("%s[%q]", path, f.Name))
		}
	}
	// Field names are distinct: any key beyond those present is one the
	// record does not name.
	if !s.Open && len(m) > present {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if !slices.ContainsFunc(s.Fields, func(f Field) bool { return f.Name == k }) {
				return fmt.Errorf("%s: unknown key %q (allowed: %s)", path, k, s.describeKeys())
			}
		}
	}
	return nil
}

func (s Record) describeKeys() string {
	parts := make([]string, len(s.Fields))
	for i, f := range s.Fields {
		parts[i] = f.Name
		if f.Optional {
			parts[i] += "?"
		}
	}
	return strings.Join(parts, ", ")
}

func (s Record) String() string {
	if s.Name != "" {
		return s.Name
	}
	return s.Literal()
}

// Literal spells the record out: {role: "system"|"user", content: string, name?: string}.
func (s Record) Literal() string {
	parts := make([]string, len(s.Fields))
	for i, f := range s.Fields {
		q := ""
		if f.Optional {
			q = "?"
		}
		parts[i] = fmt.Sprintf("%s%s: %s", f.Name, q, f.Shape)
	}
	if s.Open {
		parts = append(parts, "...")
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// Enum is a string from a fixed set.
type Enum []string

func (s Enum) Validate(v any, path string) error {
	str, ok := v.(string)
	if ok {
		for _, e := range s {
			if e == str {
				return nil
			}
		}
		return fmt.Errorf("%s: want one of %s, got %q", path, s, str)
	}
	return fmt.Errorf("%s: want one of %s, got %s", path, s, describe(v))
}

func (s Enum) String() string {
	q := make([]string, len(s))
	for i, e := range s {
		q[i] = fmt.Sprintf("%q", e)
	}
	return strings.Join(q, "|")
}

// OneOf accepts a value matching any of its shapes.
type OneOf []Shape

func (s OneOf) Validate(v any, path string) error {
	var first error
	for _, alt := range s {
		err := alt.Validate(v, path)
		if err == nil {
			return nil
		}
		if first == nil {
			first = err
		}
	}
	if len(s) == 1 {
		return first
	}
	return fmt.Errorf("%s: want %s, got %s", path, s, describe(v))
}

func (s OneOf) String() string {
	parts := make([]string, len(s))
	for i, alt := range s {
		parts[i] = alt.String()
	}
	return strings.Join(parts, " or ")
}

// Tagged is a dict whose string key Tag selects the shape of the rest, e.g.
// an action {"kind": "answer", "answer": "42"}.
type Tagged struct {
	Name     string
	Tag      string
	Variants map[string]Shape
}

func (s Tagged) Validate(v any, path string) error {
	m, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("%s: want %s, got %s", path, s, describe(v))
	}
	tag, ok := m[s.Tag].(string)
	if !ok {
		return fmt.Errorf("%s: want key %q with one of %s, got %s", path, s.Tag, s.tags(), describe(m[s.Tag]))
	}
	variant, ok := s.Variants[tag]
	if !ok {
		return fmt.Errorf("%s[%q]: want one of %s, got %q", path, s.Tag, s.tags(), tag)
	}
	return variant.Validate(v, path)
}

func (s Tagged) tags() Enum {
	tags := make([]string, 0, len(s.Variants))
	for t := range s.Variants {
		tags = append(tags, t)
	}
	sort.Strings(tags)
	return tags
}

func (s Tagged) String() string {
	if s.Name != "" {
		return s.Name
	}
	return fmt.Sprintf("dict tagged by %q (%s)", s.Tag, s.tags())
}

// Detail spells out each variant, for documentation.
func (s Tagged) Detail() string {
	var b strings.Builder
	for _, t := range s.tags() {
		v := s.Variants[t]
		if r, ok := v.(Record); ok {
			fields := make([]Field, len(r.Fields))
			for i, f := range r.Fields {
				if f.Name == s.Tag {
					f.Shape = Enum{t}
				}
				fields[i] = f
			}
			r.Fields = fields
			fmt.Fprintf(&b, "- `%s`: `%s`\n", t, r.Literal())
		} else {
			fmt.Fprintf(&b, "- `%s`: %s\n", t, v)
		}
	}
	return b.String()
}

func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		return fmt.Sprintf("bool %v", x)
	case int64:
		return fmt.Sprintf("int %d", x)
	case float64:
		return fmt.Sprintf("float %v", x)
	case string:
		return fmt.Sprintf("string %s", clip(fmt.Sprintf("%q", x), 60))
	case []any:
		return fmt.Sprintf("list of %d elements", len(x))
	case map[string]any:
		return fmt.Sprintf("dict with keys %s", clip(strings.Join(slices.Sorted(maps.Keys(x)), ", "), 80))
	}
	return fmt.Sprintf("%T", v)
}

// clip shortens s to at most n bytes (on a rune boundary), marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

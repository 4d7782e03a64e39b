package spec

import (
	"encoding"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/whalerun/whale/internal/textdist"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/lexer"
	"github.com/goccy/go-yaml/parser"
	"github.com/goccy/go-yaml/token"
)

type position struct{ line, col int }

// decoder maps a YAML syntax tree onto Go values by their yaml tags. It is
// written against the tree rather than through yaml.Unmarshal so that every
// error carries the field path, and so that positions of decoded fields are
// kept for the semantic errors found after decoding.
type decoder struct {
	file    string
	lines   []string
	anchors map[string]ast.Node
	pos     map[string]position
	errs    ErrorList
	aliases int // expansions so far; bounds alias bombs
}

const maxAliasExpansions = 10000

func newDecoder(name string, data []byte) *decoder {
	return &decoder{
		file:    name,
		lines:   strings.Split(string(data), "\n"),
		anchors: map[string]ast.Node{},
		pos:     map[string]position{},
	}
}

// parse shields callers from a panic in the YAML parser on hostile input,
// and from its memory: the tokens are checked (see checkShape) before the
// parser sees them.
func (d *decoder) parse(data []byte) (f *ast.File, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("YAML parser failed: %v", r)
		}
	}()
	tokens := lexer.Tokenize(string(data))
	if tk, msg := checkShape(tokens); tk != nil {
		d.errAt(tokenPos(tk), "", "%s", msg)
		return nil, nil
	}
	return parser.Parse(tokens, 0)
}
func (d *decoder) decodeFile(data []byte, out any) {
	if len(data) > MaxFileBytes {
		d.errAt(position{}, "", "the file is more than the %d bytes an experiment file may have", MaxFileBytes)
		return
	}
	f, err := d.parse(data)
	if f == nil && err == nil {
		return // the error is recorded
	}
	if err != nil {
		var ye yaml.Error
		if errors.As(err, &ye) {
			d.errAt(tokenPos(ye.GetToken()), "", "%s", ye.GetMessage())
		} else {
			d.errAt(position{}, "", "%s", err.Error())
		}
		return
	}
	var docs []*ast.DocumentNode
	for _, doc := range f.Docs {
		if doc != nil && doc.Body != nil {
			docs = append(docs, doc)
		}
	}
	switch {
	case len(docs) == 0:
		d.errAt(position{}, "", "the file holds no experiment fields")
		return
	case len(docs) > 1:
		d.errAt(nodePos(docs[1].Body), "", "expected one YAML document, found %d", len(docs))
		return
	}
	d.collectAnchors(docs[0].Body)
	body := d.resolve(docs[0].Body, "")
	if body == nil {
		return
	}
	if _, ok := mappingEntries(body); !ok {
		d.errAt(nodePos(body), "", "expected a mapping of experiment fields at top level, found %s", kindOf(body))
		return
	}
	d.decode(body, reflect.ValueOf(out).Elem(), "")
}

func (d *decoder) errAt(p position, path, format string, args ...any) {
	d.errs = append(d.errs, &Error{
		File: d.file, Line: p.line, Column: p.col, Path: path,
		Msg:     fmt.Sprintf(format, args...),
		Snippet: snippet(d.lines, p.line, p.col),
	})
}

// nearest returns the position recorded for path or for its closest
// ancestor, so that "data.train is required" points at the data block.
func (d *decoder) nearest(path string) (position, bool) {
	for path != "" {
		if p, ok := d.pos[path]; ok {
			return p, true
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return position{}, false
}

func (d *decoder) collectAnchors(n ast.Node) {
	switch x := n.(type) {
	case *ast.AnchorNode:
		if x.Name != nil {
			d.anchors[x.Name.GetToken().Value] = x.Value
		}
		d.collectAnchors(x.Value)
	case *ast.MappingNode:
		for _, mv := range x.Values {
			d.collectAnchors(mv)
		}
	case *ast.MappingValueNode:
		d.collectAnchors(x.Key)
		d.collectAnchors(x.Value)
	case *ast.MappingKeyNode:
		d.collectAnchors(x.Value)
	case *ast.SequenceNode:
		for _, v := range x.Values {
			d.collectAnchors(v)
		}
	case *ast.TagNode:
		d.collectAnchors(x.Value)
	}
}

// resolve strips anchors, follows aliases and applies the core tags; it
// returns nil after recording an error.
func (d *decoder) resolve(n ast.Node, path string) ast.Node {
	for {
		switch x := n.(type) {
		case *ast.AnchorNode:
			n = x.Value
		case *ast.AliasNode:
			d.aliases++
			if d.aliases > maxAliasExpansions {
				d.errAt(nodePos(x), path, "too many alias expansions (more than %d)", maxAliasExpansions)
				return nil
			}
			name := ""
			if x.Value != nil {
				name = x.Value.GetToken().Value
			}
			target, ok := d.anchors[name]
			if !ok {
				d.errAt(nodePos(x), path, "unknown alias *%s", name)
				return nil
			}
			n = target
		case *ast.TagNode:
			tag := x.Start.Value
			switch tag {
			case "!!str":
				if isScalar(x.Value) {
					tk := x.Value.GetToken()
					return &ast.StringNode{BaseNode: &ast.BaseNode{}, Token: tk, Value: tk.Value}
				}
				n = x.Value
			case "!!int", "!!float", "!!bool", "!!null", "!!map", "!!seq":
				n = x.Value
			default:
				d.errAt(nodePos(x), path, "%s: unsupported tag %s", fieldName(path), tag)
				return nil
			}
		default:
			return n
		}
		if n == nil {
			return &ast.NullNode{BaseNode: &ast.BaseNode{}}
		}
	}
}

func (d *decoder) decode(n ast.Node, v reflect.Value, path string) {
	n = d.resolve(n, path)
	if n == nil {
		return
	}
	if path != "" {
		d.pos[path] = nodePos(n)
	}
	if _, ok := n.(*ast.NullNode); ok {
		// An empty value keeps the default, like an absent key.
		return
	}
	if tu, ok := v.Addr().Interface().(encoding.TextUnmarshaler); ok {
		s, isStr := stringValue(n)
		if !isStr {
			d.typeError(n, path, "string")
			return
		}
		if err := tu.UnmarshalText([]byte(s)); err != nil {
			d.errAt(nodePos(n), path, "%s: %v", fieldName(path), err)
		}
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Map:
		d.decodeMap(n, v, path)
	case reflect.Slice:
		seq, ok := n.(*ast.SequenceNode)
		if !ok {
			d.typeError(n, path, "list")
			return
		}
		s := reflect.MakeSlice(v.Type(), len(seq.Values), len(seq.Values))
		for i, item := range seq.Values {
			d.decode(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.String:
		s, ok := stringValue(n)
		if !ok {
			d.typeError(n, path, "string")
			return
		}
		v.SetString(s)
	case reflect.Bool:
		b, ok := n.(*ast.BoolNode)
		if !ok {
			d.typeError(n, path, "boolean (true or false)")
			return
		}
		v.SetBool(b.Value)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		i, ok := d.integer(n, path, v.Type().Bits())
		if !ok {
			return
		}
		v.SetInt(i)
	case reflect.Float32, reflect.Float64:
		switch x := n.(type) {
		case *ast.FloatNode:
			v.SetFloat(x.Value)
		case *ast.IntegerNode:
			switch i := x.Value.(type) {
			case int64:
				v.SetFloat(float64(i))
			case uint64:
				v.SetFloat(float64(i))
			}
		case *ast.InfinityNode, *ast.NanNode:
			d.errAt(nodePos(n), path, "%s: expected a finite number, found %s", fieldName(path), n.GetToken().Value)
		case *ast.StringNode:
			// YAML 1.1 reads an unquoted 1e-6 (no dot) as a string; people
			// write learning rates that way, so a plain scalar that is a
			// number counts as one.
			f, err := strconv.ParseFloat(x.Value, 64)
			if x.Token.Type != token.StringType || err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
				d.typeError(n, path, "number")
				return
			}
			v.SetFloat(f)
		default:
			d.typeError(n, path, "number")
		}
	case reflect.Interface:
		val := d.toAny(n, path)
		if val == nil {
			v.SetZero()
			return
		}
		v.Set(reflect.ValueOf(val))
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(n, v.Elem(), path)
	default:
		// Only reachable when a field of an unsupported Go type is added.
		d.errAt(nodePos(n), path, "%s: cannot decode into Go type %s", fieldName(path), v.Type())
	}
}

// integer reads an integer scalar for a field of a bits-bit integer type.
// The YAML lexer reads a plain number too large for 64 bits as a string,
// and 1e9 as a string too: both are numbers to the person who wrote them,
// so the first is said to be out of range and the second, when it is a
// whole number, is read as one (validation then bounds it).
func (d *decoder) integer(n ast.Node, path string, bits int) (int64, bool) {
	lo, hi := int64(-1)<<(bits-1), int64(1<<(bits-1)-1)
	outOfRange := func(text string) (int64, bool) {
		d.errAt(nodePos(n), path, "%s: %s is out of range for a %d-bit integer: allowed %d to %d", fieldName(path), text, bits, lo, hi)
		return 0, false
	}
	switch x := n.(type) {
	case *ast.IntegerNode:
		var i int64
		switch v := x.Value.(type) {
		case int64:
			i = v
		case uint64:
			if v > 1<<63-1 {
				return outOfRange(x.Token.Value)
			}
			i = int64(v)
		}
		if i < lo || i > hi {
			return outOfRange(x.Token.Value)
		}
		return i, true
	case *ast.StringNode:
		if x.Token.Type != token.StringType {
			break // quoted: a string, whatever it holds
		}
		text := strings.ReplaceAll(x.Value, "_", "")
		if decimalRE.MatchString(text) {
			return outOfRange(x.Value) // a decimal integer the lexer could not hold
		}
		if f, err := strconv.ParseFloat(text, 64); err == nil && f == math.Trunc(f) && !math.IsInf(f, 0) {
			if f < float64(lo) || f >= float64(hi)+1 {
				return outOfRange(x.Value)
			}
			return int64(f), true
		}
	case *ast.FloatNode:
		if f := x.Value; f == math.Trunc(f) && !math.IsInf(f, 0) {
			if f < float64(lo) || f >= float64(hi)+1 {
				return outOfRange(x.Token.Value)
			}
			return int64(f), true
		}
	}
	d.typeError(n, path, "integer")
	return 0, false
}

var decimalRE = regexp.MustCompile(`^[-+]?[0-9]+$`)

// shorthander is implemented by structs that may be written as a bare
// scalar naming one of their fields (`switch: patience`).
type shorthander interface{ shorthandField() string }

func (d *decoder) decodeStruct(n ast.Node, v reflect.Value, path string) {
	entries, ok := d.entries(n, path)
	if !ok {
		if sh, isSh := v.Addr().Interface().(shorthander); isSh && isScalar(n) {
			if idx, found := structFields(v.Type())[sh.shorthandField()]; found {
				d.decode(n, v.Field(idx), path)
				return
			}
		}
		d.typeError(n, path, "mapping")
		return
	}
	fields := structFields(v.Type())
	for _, mv := range entries {
		key, kp, ok := d.key(mv, path)
		if !ok {
			continue
		}
		idx, found := fields[key]
		if !found {
			d.unknownField(kp, path, key, fields)
			continue
		}
		d.decode(mv.Value, v.Field(idx), joinPath(path, key))
	}
}

func (d *decoder) decodeMap(n ast.Node, v reflect.Value, path string) {
	if v.Type().Key().Kind() != reflect.String {
		d.errAt(nodePos(n), path, "%s: cannot decode into Go type %s", fieldName(path), v.Type())
		return
	}
	entries, ok := d.entries(n, path)
	if !ok {
		d.typeError(n, path, "mapping")
		return
	}
	m := reflect.MakeMapWithSize(v.Type(), len(entries))
	for _, mv := range entries {
		key, _, ok := d.key(mv, path)
		if !ok {
			continue
		}
		elem := reflect.New(v.Type().Elem()).Elem()
		d.decode(mv.Value, elem, joinPath(path, key))
		m.SetMapIndex(reflect.ValueOf(key).Convert(v.Type().Key()), elem)
	}
	v.Set(m)
}

// entries lists the key/value pairs of a mapping with merge keys (<<)
// expanded in place, so that later explicit keys override merged ones.
func (d *decoder) entries(n ast.Node, path string) ([]*ast.MappingValueNode, bool) {
	raw, ok := mappingEntries(n)
	if !ok {
		return nil, false
	}
	var out []*ast.MappingValueNode
	for _, mv := range raw {
		if _, isMerge := mv.Key.(*ast.MergeKeyNode); !isMerge {
			out = append(out, mv)
			continue
		}
		src := d.resolve(mv.Value, path)
		if src == nil {
			continue
		}
		sources := []ast.Node{src}
		if seq, isSeq := src.(*ast.SequenceNode); isSeq {
			sources = sources[:0]
			for _, s := range seq.Values {
				if r := d.resolve(s, path); r != nil {
					sources = append(sources, r)
				}
			}
		}
		for _, s := range sources {
			merged, ok := d.entries(s, path)
			if !ok {
				d.errAt(nodePos(s), path, "%s: merge key << expects a mapping, found %s", fieldName(path), kindOf(s))
				continue
			}
			out = append(out, merged...)
		}
	}
	return out, true
}

func (d *decoder) key(mv *ast.MappingValueNode, path string) (string, position, bool) {
	kn := ast.Node(mv.Key)
	if mk, ok := kn.(*ast.MappingKeyNode); ok {
		d.errAt(nodePos(mk), path, "%s: complex mapping keys (?) are not supported", fieldName(path))
		return "", position{}, false
	}
	kp := nodePos(kn)
	kn = d.resolve(kn, path)
	if kn == nil {
		return "", kp, false
	}
	if !isScalar(kn) {
		d.errAt(kp, path, "%s: mapping keys must be scalars, found %s", fieldName(path), kindOf(kn))
		return "", kp, false
	}
	if s, ok := kn.(*ast.StringNode); ok {
		return s.Value, kp, true
	}
	return kn.GetToken().Value, kp, true
}

func (d *decoder) unknownField(p position, path, key string, fields map[string]int) {
	known := make([]string, 0, len(fields))
	for name := range fields {
		known = append(known, name)
	}
	slices.Sort(known)
	where := "at top level"
	if path != "" {
		where = "in " + path
	}
	msg := fmt.Sprintf("unknown field %q %s (known: %s)", key, where, strings.Join(known, ", "))
	if s := closest(key, known); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	}
	d.errAt(p, joinPath(path, key), "%s", msg)
}

func (d *decoder) typeError(n ast.Node, path, want string) {
	found := kindOf(n)
	hint := ""
	if isScalar(n) {
		found += " " + n.GetToken().Value
		if want == "string" {
			hint = fmt.Sprintf(" (quote it: \"%s\")", n.GetToken().Value)
		}
	}
	d.errAt(nodePos(n), path, "%s: expected %s, found %s%s", fieldName(path), want, found, hint)
}

// toAny converts free-form YAML (model.extra) into JSON-compatible values.
func (d *decoder) toAny(n ast.Node, path string) any {
	n = d.resolve(n, path)
	if n == nil {
		return nil
	}
	if path != "" {
		d.pos[path] = nodePos(n)
	}
	switch x := n.(type) {
	case *ast.NullNode:
		return nil
	case *ast.StringNode:
		return x.Value
	case *ast.LiteralNode:
		return x.Value.Value
	case *ast.IntegerNode:
		return x.Value
	case *ast.FloatNode:
		return x.Value
	case *ast.BoolNode:
		return x.Value
	case *ast.InfinityNode:
		return x.Value
	case *ast.NanNode:
		d.errAt(nodePos(n), path, "%s: expected a finite number, found %s", fieldName(path), x.Token.Value)
		return nil
	case *ast.SequenceNode:
		out := make([]any, len(x.Values))
		for i, item := range x.Values {
			out[i] = d.toAny(item, fmt.Sprintf("%s[%d]", path, i))
		}
		return out
	}
	if entries, ok := d.entries(n, path); ok {
		out := make(map[string]any, len(entries))
		for _, mv := range entries {
			key, _, ok := d.key(mv, path)
			if !ok {
				continue
			}
			out[key] = d.toAny(mv.Value, joinPath(path, key))
		}
		return out
	}
	d.errAt(nodePos(n), path, "%s: unsupported YAML node %s", fieldName(path), kindOf(n))
	return nil
}

// structFields maps yaml names to field indexes. Fields without a yaml tag
// or tagged "-" are not part of the file.
func structFields(t reflect.Type) map[string]int {
	m := map[string]int{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" || !f.IsExported() {
			continue
		}
		m[name] = i
	}
	return m
}

func mappingEntries(n ast.Node) ([]*ast.MappingValueNode, bool) {
	switch x := n.(type) {
	case *ast.MappingNode:
		return x.Values, true
	case *ast.MappingValueNode:
		return []*ast.MappingValueNode{x}, true
	}
	return nil, false
}

func stringValue(n ast.Node) (string, bool) {
	switch x := n.(type) {
	case *ast.StringNode:
		return x.Value, true
	case *ast.LiteralNode:
		return x.Value.Value, true
	}
	return "", false
}

func isScalar(n ast.Node) bool {
	switch n.(type) {
	case *ast.StringNode, *ast.LiteralNode, *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode,
		*ast.InfinityNode, *ast.NanNode, *ast.NullNode:
		return true
	}
	return false
}

func kindOf(n ast.Node) string {
	switch n.(type) {
	case *ast.StringNode, *ast.LiteralNode:
		return "string"
	case *ast.IntegerNode:
		return "integer"
	case *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		return "float"
	case *ast.BoolNode:
		return "boolean"
	case *ast.NullNode:
		return "null"
	case *ast.MappingNode, *ast.MappingValueNode:
		return "mapping"
	case *ast.SequenceNode:
		return "list"
	case *ast.AliasNode:
		return "alias"
	}
	return n.Type().String()
}

// nodePos is where a value starts. A block mapping's own token is the first
// ':', so its first key is used instead.
func nodePos(n ast.Node) position {
	if n == nil {
		return position{}
	}
	switch x := n.(type) {
	case *ast.MappingNode:
		if !x.IsFlowStyle && len(x.Values) > 0 && x.Values[0].Key != nil {
			return tokenPos(x.Values[0].Key.GetToken())
		}
	case *ast.MappingValueNode:
		if x.Key != nil {
			return tokenPos(x.Key.GetToken())
		}
	}
	return tokenPos(n.GetToken())
}

func tokenPos(tk *token.Token) position {
	if tk == nil || tk.Position == nil {
		return position{}
	}
	return position{tk.Position.Line, tk.Position.Column}
}

// fieldName is how a message names the field at path.
func fieldName(path string) string {
	if path == "" {
		return "top level"
	}
	return "field " + path
}

// joinPath appends key to path; keys that are not plain identifiers (map
// keys in model.extra or finetune.env) are bracketed and quoted.
func joinPath(path, key string) string {
	plain := key != ""
	for _, r := range key {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			plain = false
			break
		}
	}
	switch {
	case !plain:
		return path + "[" + strconv.Quote(key) + "]"
	case path == "":
		return key
	default:
		return path + "." + key
	}
}

// closest returns the known name nearest to key when it is close enough to
// be a typo.
func closest(key string, known []string) string {
	best, bestDist := "", len(key)/2+1
	for _, k := range known {
		if dist := textdist.Levenshtein(key, k); dist < bestDist {
			best, bestDist = k, dist
		}
	}
	return best
}

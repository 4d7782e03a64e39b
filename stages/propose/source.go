package propose

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.starlark.net/syntax"
)

// dialect is the harness runtime's Starlark dialect (harness.fileOptions):
// a source that parses there parses here, so edits and comparisons see the
// same tree the runtime runs.
var dialect = &syntax.FileOptions{
	Set:             true,
	While:           true,
	TopLevelControl: true,
	GlobalReassign:  true,
}

// promptNames are the constants a prompt-only (FST) search may change.
var promptNames = map[string]bool{"SYSTEM_PROMPT": true, "USER_PROMPT": true}

func parse(filename string, src []byte) (*syntax.File, error) {
	return dialect.Parse(filename, src, 0)
}

// canonical renders f's tree without positions, comments, parentheses
// or the spelling of literals, leaving out top-level assignments to the
// names in skip. Two sources with equal renderings differ only in layout
// and comments (and in the skipped assignments), so they behave the same.
func canonical(f *syntax.File, skip map[string]bool) string {
	return strings.Join(canonicalStmts(f, skip), "\n")
}

// canonicalStmts is canonical's rendering of each top-level statement.
func canonicalStmts(f *syntax.File, skip map[string]bool) []string {
	var out []string
	for _, st := range f.Stmts {
		if a, ok := st.(*syntax.AssignStmt); ok {
			if id, ok := a.LHS.(*syntax.Ident); ok && skip[id.Name] {
				continue
			}
		}
		var b strings.Builder
		writeNode(&b, reflect.ValueOf(st))
		out = append(out, b.String())
	}
	return out
}

// canonicalDigest is a short hash of canonical(f, nil): equal for sources
// that differ only in layout and comments.
func canonicalDigest(f *syntax.File) string {
	sum := sha256.Sum256([]byte(canonical(f, nil)))
	return hex.EncodeToString(sum[:])
}

var (
	positionType = reflect.TypeFor[syntax.Position]()
	literalType  = reflect.TypeFor[*syntax.Literal]()
	parenType    = reflect.TypeFor[*syntax.ParenExpr]()
)

// writeNode prints a syntax node by reflection, so that every node type,
// present or future, is covered. Positions, unexported fields (comments)
// and the resolver's annotations (Binding, Function, Module) are left out.
func writeNode(b *strings.Builder, v reflect.Value) {
	switch v.Kind() {
	case reflect.Interface:
		if v.IsNil() {
			b.WriteString("nil")
			return
		}
		writeNode(b, v.Elem())
	case reflect.Pointer:
		if v.IsNil() {
			b.WriteString("nil")
			return
		}
		switch v.Type() {
		case literalType:
			lit := v.Interface().(*syntax.Literal)
			fmt.Fprintf(b, "Lit(%d,%q)", lit.Token, fmt.Sprint(lit.Value))
			return
		case parenType:
			writeNode(b, reflect.ValueOf(v.Interface().(*syntax.ParenExpr).X))
			return
		}
		writeNode(b, v.Elem())
	case reflect.Struct:
		t := v.Type()
		b.WriteString(t.Name())
		b.WriteByte('{')
		for i := range t.NumField() {
			fd := t.Field(i)
			if !fd.IsExported() || fd.Type == positionType {
				continue
			}
			switch fd.Name {
			case "Binding", "Function", "Module", "Options", "Path", "Raw":
				continue
			}
			b.WriteString(fd.Name)
			b.WriteByte(':')
			writeNode(b, v.Field(i))
			b.WriteByte(' ')
		}
		b.WriteByte('}')
	case reflect.Slice:
		b.WriteByte('[')
		for i := range v.Len() {
			writeNode(b, v.Index(i))
			b.WriteByte(',')
		}
		b.WriteByte(']')
	case reflect.String:
		b.WriteString(strconv.Quote(v.String()))
	case reflect.Bool:
		fmt.Fprint(b, v.Bool())
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		fmt.Fprint(b, v.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		fmt.Fprint(b, v.Uint())
	default:
		fmt.Fprintf(b, "<%s>", v.Kind())
	}
}

// promptOnlyDiff says how candidate differs from parent beyond the values
// of SYSTEM_PROMPT and USER_PROMPT, or "" when it does not. Both are
// compared as trees with every top-level assignment to those two names
// removed, so comments and layout may change anywhere (they change no
// behaviour) but any other code may not, docstrings included.
func promptOnlyDiff(parent, candidate *syntax.File) string {
	p := canonicalStmts(parent, promptNames)
	c := canonicalStmts(candidate, promptNames)
	if len(p) == len(c) {
		for i := range p {
			if p[i] != c[i] {
				return "changes code other than SYSTEM_PROMPT and USER_PROMPT at " + stmtPos(candidate, promptNames, i)
			}
		}
		return ""
	}
	// A statement was added or removed: name the first one that differs.
	n := min(len(p), len(c))
	for i := 0; i < n; i++ {
		if p[i] != c[i] {
			return "changes code other than SYSTEM_PROMPT and USER_PROMPT at " + stmtPos(candidate, promptNames, i)
		}
	}
	if len(c) > len(p) {
		return "adds code other than SYSTEM_PROMPT and USER_PROMPT at " + stmtPos(candidate, promptNames, n)
	}
	return "removes code other than SYSTEM_PROMPT and USER_PROMPT (the parent's statement " + stmtPos(parent, promptNames, n) + ")"
}

// stmtPos is the position of the i-th top-level statement of f that
// canonical(f, skip) renders.
func stmtPos(f *syntax.File, skip map[string]bool, i int) string {
	k := 0
	for _, st := range f.Stmts {
		if a, ok := st.(*syntax.AssignStmt); ok {
			if id, ok := a.LHS.(*syntax.Ident); ok && skip[id.Name] {
				continue
			}
		}
		if k == i {
			start, _ := st.Span()
			return fmt.Sprintf("%s:%d", start.Filename(), start.Line)
		}
		k++
	}
	return f.Path
}

// errNotRewritable: the source is one setConstant leaves alone; mutate
// skips the edit.
var errNotRewritable = errors.New("constant is not bound by one plain top-level assignment")

// setConstant returns src with the top-level assignment of name rewritten
// to bind literal (Starlark source of the new value); the rest of the file
// stays byte for byte as written. A source that does not bind name gets
// the assignment before its first statement, after any leading comments,
// so that top-level code that reads the name sees the new value too. A
// source that binds it in a way one rewrite cannot replace (twice, in an
// if, by +=, in a tuple) gets the assignment appended at the end, where it
// overrides whatever the code above computed.
func setConstant(filename string, src []byte, name, literal string) ([]byte, error) {
	if bytes.ContainsRune(src, '\r') {
		// The scanner counts a lone \r as a line end; rather than mirror
		// that, leave such files alone.
		return nil, fmt.Errorf("%s: %w (the file has carriage returns)", name, errNotRewritable)
	}
	f, err := parse(filename, src)
	if err != nil {
		return nil, err
	}
	var plain []*syntax.AssignStmt
	other := false
	for _, st := range f.Stmts {
		if a, ok := st.(*syntax.AssignStmt); ok {
			if id, ok := a.LHS.(*syntax.Ident); ok && id.Name == name {
				if a.Op == syntax.EQ {
					plain = append(plain, a)
				} else {
					other = true
				}
				continue
			}
		}
		if bindsNested(st, name) {
			other = true
		}
	}
	switch {
	case other || len(plain) > 1:
		out := append([]byte(nil), src...)
		if len(out) > 0 && out[len(out)-1] != '\n' {
			out = append(out, '\n')
		}
		out = append(out, "\n# Set last: this value overrides the one computed above.\n"...)
		return append(out, name+" = "+literal+"\n"...), nil
	case len(plain) == 1:
		start, end := plain[0].RHS.Span()
		i, err := offset(src, start)
		if err != nil {
			return nil, err
		}
		j, err := offset(src, end)
		if err != nil {
			return nil, err
		}
		out := make([]byte, 0, len(src)-(j-i)+len(literal))
		out = append(out, src[:i]...)
		out = append(out, literal...)
		return append(out, src[j:]...), nil
	}
	line := name + " = " + literal + "\n"
	if len(f.Stmts) == 0 {
		if len(src) > 0 && src[len(src)-1] != '\n' {
			return append(append(append([]byte(nil), src...), '\n'), line...), nil
		}
		return append(append([]byte(nil), src...), line...), nil
	}
	start, _ := f.Stmts[0].Span()
	i, err := offset(src, syntax.MakePosition(nil, start.Line, 1))
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(src)+len(line)+1)
	out = append(out, src[:i]...)
	out = append(out, line...)
	out = append(out, '\n')
	return append(out, src[i:]...), nil
}

// bindsNested reports whether st binds name anywhere but as a plain
// top-level "name = ..." (in an if, a for, a tuple assignment, a def).
func bindsNested(st syntax.Stmt, name string) bool {
	found := false
	syntax.Walk(st, func(n syntax.Node) bool {
		switch x := n.(type) {
		case *syntax.AssignStmt:
			if bindsIdent(x.LHS, name) {
				found = true
			}
		case *syntax.ForStmt:
			if bindsIdent(x.Vars, name) {
				found = true
			}
		case *syntax.DefStmt:
			if x.Name.Name == name {
				found = true
			}
			return false // assignments inside a def are local
		case *syntax.LambdaExpr:
			return false
		}
		return !found
	})
	return found
}

func bindsIdent(e syntax.Expr, name string) bool {
	switch x := e.(type) {
	case *syntax.Ident:
		return x.Name == name
	case *syntax.TupleExpr:
		for _, el := range x.List {
			if bindsIdent(el, name) {
				return true
			}
		}
	case *syntax.ListExpr:
		for _, el := range x.List {
			if bindsIdent(el, name) {
				return true
			}
		}
	case *syntax.ParenExpr:
		return bindsIdent(x.X, name)
	}
	return false
}

// offset converts a scanner position (1-based line, 1-based column in
// runes) to a byte offset in src.
func offset(src []byte, p syntax.Position) (int, error) {
	if p.Line < 1 || p.Col < 1 {
		return 0, fmt.Errorf("position %d:%d is unknown", p.Line, p.Col)
	}
	i := 0
	for line := int32(1); line < p.Line; line++ {
		j := bytes.IndexByte(src[i:], '\n')
		if j < 0 {
			return 0, fmt.Errorf("line %d is past the end of the file", p.Line)
		}
		i += j + 1
	}
	for col := int32(1); col < p.Col; col++ {
		if i >= len(src) || src[i] == '\n' {
			return 0, fmt.Errorf("column %d of line %d is past the end of the line", p.Col, p.Line)
		}
		_, w := utf8.DecodeRune(src[i:])
		i += w
	}
	return i, nil
}

// quote spells s as a Starlark string literal: a triple-quoted one when
// s has several lines (people read these sources), else a plain one. The
// result always parses back to s.
func quote(s string) string {
	plain := syntax.Quote(s, false)
	if !strings.Contains(s, "\n") || !utf8.ValidString(s) {
		return plain
	}
	var b strings.Builder
	b.WriteString(`"""`)
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == '"':
			b.WriteString(`\"`)
		case r == '\n':
			b.WriteByte('\n')
		case r == '\t' || strconv.IsPrint(r):
			b.WriteRune(r)
		default:
			q := syntax.Quote(string(r), false)
			b.WriteString(q[1 : len(q)-1])
		}
	}
	b.WriteString(`"""`)
	if v, ok := literalValue(b.String()); ok && v == s {
		return b.String()
	}
	return plain
}

func literalValue(lit string) (string, bool) {
	e, err := syntax.ParseExpr("literal", lit, 0)
	if err != nil {
		return "", false
	}
	l, ok := e.(*syntax.Literal)
	if !ok || l.Token != syntax.STRING {
		return "", false
	}
	s, ok := l.Value.(string)
	return s, ok
}

package harness

import (
	"strconv"

	"go.starlark.net/syntax"
)

// The operations of Starlark that can allocate, in one step, far more
// than their operands hold — "x" * n, [0] * n, s + s doubled a few
// times, "%s" % v, x[i:j] over a large list — run in the interpreter with
// no hook of the embedder's. Load rewrites a harness's syntax tree so that
// each of them calls a guard instead (guards.go), which computes the size
// of the result before making it, refuses one above Options.MaxAllocBytes
// and charges it to the call's memory budget:
//
//	x + y, x * y, x % y, x | y, x - y, x << y   →  ·+(x, y), ·*(x, y), ...
//	x op= y (those ops)                          →  x = ·op=(x, y)
//	a[i] op= y (any op)                          →  ·t1 = a; ·t2 = i; ·t1[·t2] = ·op=(·index(·t1, ·t2), y)
//	x[i]                                         →  ·index(x, i)
//	x[i:j:k]                                     →  ·slice(x, lo=i, hi=j, step=k)
//	x.join, x.format, x.replace, x.split, ...    →  ·attr(x, "join"), ...
//	f(*args, **kwargs)                           →  f(*·star(args), **·star(kwargs))
//
// The guards' names start with "·", which no identifier can, so harness
// code can neither call nor shadow them. Positions are kept: a guard's call
// sits at its operator, so errors point where they did. Operations whose
// result cannot be large are left to the interpreter: i + 1, n % 2 (an
// operand is a number literal), "-" * 40 (literals with a small product),
// and the and/or, comparison and in operators.
const (
	hiddenPrefix = "·"
	guardIndex   = hiddenPrefix + "index"
	guardSlice   = hiddenPrefix + "slice"
	guardAttr    = hiddenPrefix + "attr"
	guardStar    = hiddenPrefix + "star"
	guardStar2   = hiddenPrefix + "starstar"
)

// sliceParams name the bounds of ·slice(x, lo=, hi=, step=).
var sliceParams = [3]string{"lo", "hi", "step"}

// guardedOps are the binary operators that run through a guard, with the
// guard's name; their augmented forms add "=".
var guardedOps = map[syntax.Token]string{
	syntax.PLUS:    hiddenPrefix + "+",
	syntax.STAR:    hiddenPrefix + "*",
	syntax.PERCENT: hiddenPrefix + "%",
	syntax.PIPE:    hiddenPrefix + "|",
	syntax.MINUS:   hiddenPrefix + "-",
	syntax.LTLT:    hiddenPrefix + "<<",
}

// augOps maps an augmented assignment's token to its binary operator.
var augOps = map[syntax.Token]syntax.Token{
	syntax.PLUS_EQ:       syntax.PLUS,
	syntax.MINUS_EQ:      syntax.MINUS,
	syntax.STAR_EQ:       syntax.STAR,
	syntax.SLASH_EQ:      syntax.SLASH,
	syntax.SLASHSLASH_EQ: syntax.SLASHSLASH,
	syntax.PERCENT_EQ:    syntax.PERCENT,
	syntax.AMP_EQ:        syntax.AMP,
	syntax.PIPE_EQ:       syntax.PIPE,
	syntax.CIRCUMFLEX_EQ: syntax.CIRCUMFLEX,
	syntax.LTLT_EQ:       syntax.LTLT,
	syntax.GTGT_EQ:       syntax.GTGT,
}

// augGuardName is the guard of an augmented assignment x op= y: the
// in-place forms (a list's +=, a dict's |=) keep their meaning.
func augGuardName(op syntax.Token) string { return hiddenPrefix + op.String() + "=" }

// guardedMethods are the methods of strings, lists, dicts and sets whose
// result can be large; x.name for these names goes through ·attr, which
// hands out a bounded version of the method (guards.go).
var guardedMethods = map[string]bool{
	"join": true, "format": true, "replace": true, "split": true, "rsplit": true, "splitlines": true,
	"upper": true, "lower": true, "title": true, "capitalize": true,
	"extend": true, "update": true, "items": true, "keys": true, "values": true,
	"union": true, "difference": true, "intersection": true, "symmetric_difference": true,
}

// rewriter rewrites one file's syntax tree (see the comment above).
type rewriter struct {
	temps int // hidden temporaries made so far
}

func rewriteFile(f *syntax.File) {
	rw := &rewriter{}
	f.Stmts = rw.stmts(f.Stmts)
}

func (rw *rewriter) stmts(list []syntax.Stmt) []syntax.Stmt {
	out := list[:0:0]
	for _, s := range list {
		out = append(out, rw.stmt(s)...)
	}
	return out
}

func (rw *rewriter) stmt(s syntax.Stmt) []syntax.Stmt {
	switch s := s.(type) {
	case *syntax.AssignStmt:
		if s.Op == syntax.EQ {
			s.RHS = rw.expr(s.RHS)
			s.LHS = rw.target(s.LHS)
			return []syntax.Stmt{s}
		}
		return rw.augmented(s)
	case *syntax.DefStmt:
		rw.params(s.Params)
		s.Body = rw.stmts(s.Body)
	case *syntax.ExprStmt:
		s.X = rw.expr(s.X)
	case *syntax.ForStmt:
		s.X = rw.expr(s.X)
		s.Vars = rw.target(s.Vars)
		s.Body = rw.stmts(s.Body)
	case *syntax.WhileStmt:
		s.Cond = rw.expr(s.Cond)
		s.Body = rw.stmts(s.Body)
	case *syntax.IfStmt:
		s.Cond = rw.expr(s.Cond)
		s.True = rw.stmts(s.True)
		s.False = rw.stmts(s.False)
	case *syntax.ReturnStmt:
		if s.Result != nil {
			s.Result = rw.expr(s.Result)
		}
	}
	return []syntax.Stmt{s}
}

// augmented rewrites x op= y. A plain name is evaluated twice at no cost;
// a[i] and a.f have their operands evaluated once, into hidden
// temporaries, as the interpreter would.
func (rw *rewriter) augmented(s *syntax.AssignStmt) []syntax.Stmt {
	op, ok := augOps[s.Op]
	if !ok {
		s.RHS = rw.expr(s.RHS)
		s.LHS = rw.target(s.LHS)
		return []syntax.Stmt{s}
	}
	pos := s.OpPos
	switch lhs := s.LHS.(type) {
	case *syntax.Ident:
		if _, guarded := guardedOps[op]; !guarded || ((op == syntax.PLUS || op == syntax.MINUS || op == syntax.PERCENT) && isNumber(s.RHS)) {
			s.RHS = rw.expr(s.RHS) // i += 1: the interpreter's own
			return []syntax.Stmt{s}
		}
		rhs := call(pos, augGuardName(op), ident(lhs.NamePos, lhs.Name), rw.expr(s.RHS))
		return []syntax.Stmt{&syntax.AssignStmt{OpPos: pos, Op: syntax.EQ, LHS: lhs, RHS: rhs}}
	case *syntax.IndexExpr:
		x, i := rw.temp(), rw.temp()
		pre := []syntax.Stmt{
			assign(lhs.Lbrack, x, rw.expr(lhs.X)),
			assign(lhs.Lbrack, i, rw.expr(lhs.Y)),
		}
		cur := call(lhs.Lbrack, guardIndex, ident(lhs.Lbrack, x), ident(lhs.Lbrack, i))
		rhs := call(pos, augGuardName(op), cur, rw.expr(s.RHS))
		target := &syntax.IndexExpr{X: ident(lhs.Lbrack, x), Lbrack: lhs.Lbrack, Y: ident(lhs.Lbrack, i), Rbrack: lhs.Rbrack}
		return append(pre, &syntax.AssignStmt{OpPos: pos, Op: syntax.EQ, LHS: target, RHS: rhs})
	case *syntax.DotExpr:
		x := rw.temp()
		pre := []syntax.Stmt{assign(lhs.Dot, x, rw.expr(lhs.X))}
		cur := rw.expr(&syntax.DotExpr{X: ident(lhs.Dot, x), Dot: lhs.Dot, NamePos: lhs.NamePos, Name: ident(lhs.NamePos, lhs.Name.Name)})
		rhs := call(pos, augGuardName(op), cur, rw.expr(s.RHS))
		target := &syntax.DotExpr{X: ident(lhs.Dot, x), Dot: lhs.Dot, NamePos: lhs.NamePos, Name: ident(lhs.NamePos, lhs.Name.Name)}
		return append(pre, &syntax.AssignStmt{OpPos: pos, Op: syntax.EQ, LHS: target, RHS: rhs})
	}
	// Anything else is a resolve error the compiler reports as it is.
	s.RHS = rw.expr(s.RHS)
	return []syntax.Stmt{s}
}

func (rw *rewriter) temp() string {
	rw.temps++
	return hiddenPrefix + "t" + strconv.Itoa(rw.temps)
}

// target rewrites what an assignment stores to: the operands of a[i] and
// a.f are ordinary expressions, the names themselves stay.
func (rw *rewriter) target(e syntax.Expr) syntax.Expr {
	switch e := e.(type) {
	case *syntax.IndexExpr:
		e.X = rw.expr(e.X)
		e.Y = rw.expr(e.Y)
	case *syntax.DotExpr:
		e.X = rw.expr(e.X)
	case *syntax.TupleExpr:
		for i, x := range e.List {
			e.List[i] = rw.target(x)
		}
	case *syntax.ListExpr:
		for i, x := range e.List {
			e.List[i] = rw.target(x)
		}
	case *syntax.ParenExpr:
		e.X = rw.target(e.X)
	}
	return e
}

// params rewrites the default values of a def's or lambda's parameters.
func (rw *rewriter) params(params []syntax.Expr) {
	for _, p := range params {
		if b, ok := p.(*syntax.BinaryExpr); ok && b.Op == syntax.EQ {
			b.Y = rw.expr(b.Y)
		}
	}
}

func (rw *rewriter) exprs(list []syntax.Expr) {
	for i, x := range list {
		list[i] = rw.expr(x)
	}
}

func (rw *rewriter) expr(e syntax.Expr) syntax.Expr {
	switch e := e.(type) {
	case *syntax.BinaryExpr:
		e.X = rw.expr(e.X)
		e.Y = rw.expr(e.Y)
		name, ok := guardedOps[e.Op]
		if !ok || smallResult(e) {
			return e
		}
		return call(e.OpPos, name, e.X, e.Y)
	case *syntax.IndexExpr:
		return call(e.Lbrack, guardIndex, rw.expr(e.X), rw.expr(e.Y))
	case *syntax.SliceExpr:
		// Bounds left out are left out of the call too (None could be
		// shadowed by a global of that name).
		args := []syntax.Expr{rw.expr(e.X)}
		for i, x := range []syntax.Expr{e.Lo, e.Hi, e.Step} {
			if x != nil {
				args = append(args, &syntax.BinaryExpr{X: ident(e.Lbrack, sliceParams[i]), OpPos: e.Lbrack, Op: syntax.EQ, Y: rw.expr(x)})
			}
		}
		return call(e.Lbrack, guardSlice, args...)
	case *syntax.DotExpr:
		e.X = rw.expr(e.X)
		if !guardedMethods[e.Name.Name] {
			return e
		}
		name := &syntax.Literal{Token: syntax.STRING, TokenPos: e.NamePos, Raw: strconv.Quote(e.Name.Name), Value: e.Name.Name}
		return call(e.Dot, guardAttr, e.X, name)
	case *syntax.CallExpr:
		e.Fn = rw.expr(e.Fn)
		for i, a := range e.Args {
			switch a := a.(type) {
			case *syntax.BinaryExpr: // name=value
				if a.Op == syntax.EQ {
					a.Y = rw.expr(a.Y)
					continue
				}
			case *syntax.UnaryExpr: // *args, **kwargs
				if a.Op == syntax.STAR || a.Op == syntax.STARSTAR {
					name := guardStar
					if a.Op == syntax.STARSTAR {
						name = guardStar2
					}
					a.X = call(a.OpPos, name, rw.expr(a.X))
					continue
				}
			}
			e.Args[i] = rw.expr(a)
		}
	case *syntax.UnaryExpr:
		if e.X != nil {
			e.X = rw.expr(e.X)
		}
	case *syntax.ParenExpr:
		e.X = rw.expr(e.X)
	case *syntax.CondExpr:
		e.Cond = rw.expr(e.Cond)
		e.True = rw.expr(e.True)
		e.False = rw.expr(e.False)
	case *syntax.ListExpr:
		rw.exprs(e.List)
	case *syntax.TupleExpr:
		rw.exprs(e.List)
	case *syntax.DictExpr:
		for _, x := range e.List {
			if de, ok := x.(*syntax.DictEntry); ok {
				de.Key = rw.expr(de.Key)
				de.Value = rw.expr(de.Value)
			}
		}
	case *syntax.Comprehension:
		for _, c := range e.Clauses {
			switch c := c.(type) {
			case *syntax.ForClause:
				c.X = rw.expr(c.X)
				c.Vars = rw.target(c.Vars)
			case *syntax.IfClause:
				c.Cond = rw.expr(c.Cond)
			}
		}
		e.Body = rw.expr(e.Body)
	case *syntax.LambdaExpr:
		rw.params(e.Params)
		e.Body = rw.expr(e.Body)
	}
	return e
}

// smallResult reports whether a guarded binary operation can be left to
// the interpreter: adding, subtracting or taking the remainder by a number
// literal cannot make a large value (a string % 7 formats one small
// argument), nor can adding two literals or repeating a literal a few
// times ("-" * 40).
func smallResult(e *syntax.BinaryExpr) bool {
	switch e.Op {
	case syntax.PLUS, syntax.MINUS, syntax.PERCENT:
		if isNumber(e.Y) || (e.Op != syntax.PERCENT && isNumber(e.X)) {
			return true
		}
	}
	x, xok := e.X.(*syntax.Literal)
	y, yok := e.Y.(*syntax.Literal)
	if !xok || !yok {
		return false
	}
	if e.Op != syntax.STAR {
		// "a" + "b", "%s" % "x": no longer than the source.
		return e.Op == syntax.PLUS || e.Op == syntax.PERCENT
	}
	// "-" * 40: small enough when the product is.
	size := func(l *syntax.Literal) (int64, bool) {
		switch v := l.Value.(type) {
		case string:
			return int64(len(v)), true
		case int64:
			return v, v >= 0 && v <= 1<<16
		}
		return 0, false
	}
	a, aok := size(x)
	b, bok := size(y)
	return aok && bok && a*b <= 1<<16
}

func isNumber(e syntax.Expr) bool {
	if p, ok := e.(*syntax.ParenExpr); ok {
		return isNumber(p.X)
	}
	if u, ok := e.(*syntax.UnaryExpr); ok && (u.Op == syntax.MINUS || u.Op == syntax.PLUS) {
		return isNumber(u.X)
	}
	l, ok := e.(*syntax.Literal)
	return ok && (l.Token == syntax.INT || l.Token == syntax.FLOAT)
}

func ident(pos syntax.Position, name string) *syntax.Ident {
	return &syntax.Ident{NamePos: pos, Name: name}
}

func call(pos syntax.Position, fn string, args ...syntax.Expr) *syntax.CallExpr {
	return &syntax.CallExpr{Fn: ident(pos, fn), Lparen: pos, Args: args, Rparen: pos}
}

func assign(pos syntax.Position, name string, x syntax.Expr) *syntax.AssignStmt {
	return &syntax.AssignStmt{OpPos: pos, Op: syntax.EQ, LHS: ident(pos, name), RHS: x}
}

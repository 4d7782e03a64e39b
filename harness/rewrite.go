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
// Comparing and hashing nested values can take unbounded time in one step
// (compare.go), so comparisons, membership tests and dict keys go through
// guards too, as do the methods that hash or compare their argument:
//
//	x == y, x != y, x < y, ... x in y, x not in y  →  ·==(x, y), ..., ·in(x, y), ·not in(x, y)
//	{k: v}, {k: v for ...}, d[k] = v               →  {·key(k): v}, ..., d[·key(k)] = v
//	{k1: v1, k2: v2}                               →  {·dictkey(k1): v1, ·dictkey(k2): v2}
//	x.get(k), x.add(k), x.index(k), ...            →  ·attr(x, "get")(k), ...
//
// The guards' names start with "·", which no identifier can, so harness
// code can neither call nor shadow them. Positions are kept: a guard's call
// sits at its operator, so errors point where they did. Operations whose
// result cannot be large are left to the interpreter: i + 1, n % 2 (an
// operand is a number literal), "-" * 40 (literals with a small product),
// and the and/or operators; so are comparisons, membership tests, keys and
// method calls whose operand is cheap to compare and hash (cheap: x ==
// "done", n > 0, k in ("a", "b"), x == None, d.get("k"), {"role": r}).
//
// At the top level the hidden temporaries of a[i] op= y are globals: they
// are set back to 0 after the statement, so that they hold nothing, and
// Load drops them from the module's globals.
const (
	hiddenPrefix = "·"
	guardIndex   = hiddenPrefix + "index"
	guardSlice   = hiddenPrefix + "slice"
	guardAttr    = hiddenPrefix + "attr"
	guardStar    = hiddenPrefix + "star"
	guardStar2   = hiddenPrefix + "starstar"
	guardKey     = hiddenPrefix + "key"
	guardDictKey = hiddenPrefix + "dictkey"
	tempX        = hiddenPrefix + "t1" // a[i] op= y: a
	tempI        = hiddenPrefix + "t2" // a[i] op= y: i
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
	// Sets: & and ^ hash the elements of their operands.
	syntax.AMP:        hiddenPrefix + "&",
	syntax.CIRCUMFLEX: hiddenPrefix + "^",
}

// compareOps are the comparison and membership operators, with their
// guards' names (compare.go).
var compareOps = map[syntax.Token]string{
	syntax.EQL:    hiddenPrefix + "==",
	syntax.NEQ:    hiddenPrefix + "!=",
	syntax.LT:     hiddenPrefix + "<",
	syntax.LE:     hiddenPrefix + "<=",
	syntax.GT:     hiddenPrefix + ">",
	syntax.GE:     hiddenPrefix + ">=",
	syntax.IN:     hiddenPrefix + "in",
	syntax.NOT_IN: hiddenPrefix + "not in",
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
// result can be large, or that hash or compare their argument (keyMethods);
// x.name for these names goes through ·attr, which hands out a bounded
// version of the method (guards.go).
var guardedMethods = map[string]bool{
	"join": true, "format": true, "replace": true, "split": true, "rsplit": true, "splitlines": true,
	"upper": true, "lower": true, "title": true, "capitalize": true,
	"extend": true, "update": true, "items": true, "keys": true, "values": true,
	"union": true, "difference": true, "intersection": true, "symmetric_difference": true,
	"issubset": true, "issuperset": true,
	"get": true, "setdefault": true, "pop": true, "add": true, "discard": true, "remove": true, "index": true,
}

// keyMethods are the methods of guardedMethods that only hash or compare
// their argument: called with cheap arguments (d.get("k"), l.pop()), they
// are left to the interpreter.
var keyMethods = map[string]bool{
	"get": true, "setdefault": true, "pop": true, "add": true, "discard": true, "remove": true, "index": true,
	"issubset": true, "issuperset": true,
}

// rewriter rewrites one file's syntax tree (see the comment above).
type rewriter struct {
	inDef   int             // nesting of def statements: 0 at the top level
	rebound map[string]bool // None, True, False where the file binds them
}

func rewriteFile(f *syntax.File) {
	rw := &rewriter{rebound: reboundConstants(f)}
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
		rw.inDef++
		s.Body = rw.stmts(s.Body)
		rw.inDef--
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
// temporaries, as the interpreter would. (The key of a[i] need not go
// through ·key: ·index hashes it first, and refuses what is too costly.)
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
		if _, guarded := guardedOps[op]; !guarded || (numberOperandIsSmall(op) && isNumber(s.RHS)) {
			s.RHS = rw.expr(s.RHS) // i += 1: the interpreter's own
			return []syntax.Stmt{s}
		}
		rhs := call(pos, augGuardName(op), ident(lhs.NamePos, lhs.Name), rw.expr(s.RHS))
		return []syntax.Stmt{&syntax.AssignStmt{OpPos: pos, Op: syntax.EQ, LHS: lhs, RHS: rhs}}
	case *syntax.IndexExpr:
		x, i := tempX, tempI
		pre := []syntax.Stmt{
			assign(lhs.Lbrack, x, rw.expr(lhs.X)),
			assign(lhs.Lbrack, i, rw.expr(lhs.Y)),
		}
		cur := call(lhs.Lbrack, guardIndex, ident(lhs.Lbrack, x), ident(lhs.Lbrack, i))
		rhs := call(pos, augGuardName(op), cur, rw.expr(s.RHS))
		target := &syntax.IndexExpr{X: ident(lhs.Lbrack, x), Lbrack: lhs.Lbrack, Y: ident(lhs.Lbrack, i), Rbrack: lhs.Rbrack}
		out := append(pre, &syntax.AssignStmt{OpPos: pos, Op: syntax.EQ, LHS: target, RHS: rhs})
		return append(out, rw.release(pos, x, i)...)
	case *syntax.DotExpr:
		x := tempX
		pre := []syntax.Stmt{assign(lhs.Dot, x, rw.expr(lhs.X))}
		cur := rw.expr(&syntax.DotExpr{X: ident(lhs.Dot, x), Dot: lhs.Dot, NamePos: lhs.NamePos, Name: ident(lhs.NamePos, lhs.Name.Name)})
		rhs := call(pos, augGuardName(op), cur, rw.expr(s.RHS))
		target := &syntax.DotExpr{X: ident(lhs.Dot, x), Dot: lhs.Dot, NamePos: lhs.NamePos, Name: ident(lhs.NamePos, lhs.Name.Name)}
		out := append(pre, &syntax.AssignStmt{OpPos: pos, Op: syntax.EQ, LHS: target, RHS: rhs})
		return append(out, rw.release(pos, x)...)
	}
	// Anything else is a resolve error the compiler reports as it is.
	s.RHS = rw.expr(s.RHS)
	return []syntax.Stmt{s}
}

// release sets hidden temporaries back to 0 after the statement that used
// them, at the top level, where they are globals and would keep their
// values alive (inside a def they are locals, gone at the return).
func (rw *rewriter) release(pos syntax.Position, names ...string) []syntax.Stmt {
	if rw.inDef > 0 {
		return nil
	}
	out := make([]syntax.Stmt, len(names))
	for i, name := range names {
		out[i] = assign(pos, name, &syntax.Literal{Token: syntax.INT, TokenPos: pos, Raw: "0", Value: int64(0)})
	}
	return out
}

// target rewrites what an assignment stores to: the operands of a[i] and
// a.f are ordinary expressions (the key of a[i] goes through ·key), the
// names themselves stay.
func (rw *rewriter) target(e syntax.Expr) syntax.Expr {
	switch e := e.(type) {
	case *syntax.IndexExpr:
		e.X = rw.expr(e.X)
		e.Y = rw.key(e.Lbrack, rw.expr(e.Y), guardKey)
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
		if name, ok := compareOps[e.Op]; ok {
			if rw.cheap(e.X) || rw.cheap(e.Y) {
				return e // comparing with a cheap value takes one look
			}
			return call(e.OpPos, name, e.X, e.Y)
		}
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
		if dot, ok := e.Fn.(*syntax.DotExpr); ok && keyMethods[dot.Name.Name] && rw.cheapArgs(e.Args) {
			dot.X = rw.expr(dot.X) // d.get("k"), l.pop(): the interpreter's
		} else {
			e.Fn = rw.expr(e.Fn)
		}
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
		guard := guardKey
		if len(e.List) > 1 {
			guard = guardDictKey // a duplicate key is an error that prints it
		}
		for _, x := range e.List {
			if de, ok := x.(*syntax.DictEntry); ok {
				de.Key = rw.key(de.Colon, rw.expr(de.Key), guard)
				de.Value = rw.expr(de.Value)
			}
		}
	case *syntax.DictEntry: // the body of a dict comprehension
		e.Key = rw.key(e.Colon, rw.expr(e.Key), guardKey)
		e.Value = rw.expr(e.Value)
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

// key is a dict key k about to be hashed, through the guard unless it is
// cheap.
func (rw *rewriter) key(pos syntax.Position, k syntax.Expr, guard string) syntax.Expr {
	if rw.cheap(k) {
		return k
	}
	return call(pos, guard, k)
}

// numberOperandIsSmall reports whether x op n, for a number literal n,
// cannot make a large value: adding, subtracting, or taking the remainder
// (a string % 7 formats one small argument), and the bitwise operators
// (a set & 1 is an error).
func numberOperandIsSmall(op syntax.Token) bool {
	switch op {
	case syntax.PLUS, syntax.MINUS, syntax.PERCENT, syntax.AMP, syntax.PIPE, syntax.CIRCUMFLEX:
		return true
	}
	return false
}

// smallResult reports whether a guarded binary operation can be left to
// the interpreter: an operation with a number literal that cannot make a
// large value (numberOperandIsSmall), adding two literals or repeating a
// literal a few times ("-" * 40).
func smallResult(e *syntax.BinaryExpr) bool {
	if numberOperandIsSmall(e.Op) && (isNumber(e.Y) || (e.Op != syntax.PERCENT && isNumber(e.X))) {
		return true
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

// cheapNodes bounds the size of a literal list, tuple or dict that counts
// as cheap: x in B compares it with every element of B.
const cheapNodes = 16

// cheap reports whether e is sure to evaluate to a value that is cheap to
// compare with anything and to hash: a number or bool (a literal, an
// arithmetic or comparison result, None, True, False where the file does
// not rebind them), a string or bytes literal of a few hundred bytes, or a
// small literal list, tuple or dict of such values.
func (rw *rewriter) cheap(e syntax.Expr) bool {
	n := cheapNodes
	return rw.cheapN(e, &n)
}

func (rw *rewriter) cheapN(e syntax.Expr, n *int) bool {
	if *n--; *n < 0 {
		return false
	}
	switch e := e.(type) {
	case *syntax.Literal:
		if s, ok := e.Value.(string); ok {
			return len(s) < cmpStringBytes
		}
		return true
	case *syntax.Ident:
		switch e.Name {
		case "None", "True", "False":
			return !rw.rebound[e.Name]
		}
	case *syntax.ParenExpr:
		return rw.cheapN(e.X, n)
	case *syntax.UnaryExpr:
		// not x is a bool; -x, +x and ~x a number or an error.
		return e.Op == syntax.NOT || e.Op == syntax.MINUS || e.Op == syntax.PLUS || e.Op == syntax.TILDE
	case *syntax.BinaryExpr:
		switch e.Op {
		case syntax.EQL, syntax.NEQ, syntax.LT, syntax.LE, syntax.GT, syntax.GE, syntax.IN, syntax.NOT_IN,
			syntax.SLASH, syntax.SLASHSLASH, syntax.LTLT, syntax.GTGT:
			return true // a bool or a number, or an error
		case syntax.AND, syntax.OR:
			return rw.cheapN(e.X, n) && rw.cheapN(e.Y, n)
		case syntax.PLUS, syntax.MINUS, syntax.AMP, syntax.PIPE, syntax.CIRCUMFLEX:
			return isNumber(e.X) || isNumber(e.Y) // a number, or an error
		}
	case *syntax.CondExpr:
		return rw.cheapN(e.True, n) && rw.cheapN(e.False, n)
	case *syntax.ListExpr:
		return rw.cheapList(e.List, n)
	case *syntax.TupleExpr:
		return rw.cheapList(e.List, n)
	case *syntax.DictExpr:
		for _, x := range e.List {
			de, ok := x.(*syntax.DictEntry)
			if !ok || !rw.cheapN(de.Key, n) || !rw.cheapN(de.Value, n) {
				return false
			}
		}
		return true
	}
	return false
}

func (rw *rewriter) cheapList(list []syntax.Expr, n *int) bool {
	for _, x := range list {
		if !rw.cheapN(x, n) {
			return false
		}
	}
	return true
}

// cheapArgs reports whether a call's arguments are all cheap (no *args).
func (rw *rewriter) cheapArgs(args []syntax.Expr) bool {
	for _, a := range args {
		if b, ok := a.(*syntax.BinaryExpr); ok && b.Op == syntax.EQ {
			a = b.Y // name=value
		}
		if !rw.cheap(a) {
			return false
		}
	}
	return true
}

// reboundConstants finds which of None, True and False the file binds
// anywhere (a global, a local, a parameter, a loop variable): there they
// are not known to be cheap.
func reboundConstants(f *syntax.File) map[string]bool {
	var found map[string]bool
	var bind func(e syntax.Expr)
	bind = func(e syntax.Expr) {
		switch e := e.(type) {
		case *syntax.Ident:
			switch e.Name {
			case "None", "True", "False":
				if found == nil {
					found = map[string]bool{}
				}
				found[e.Name] = true
			}
		case *syntax.TupleExpr:
			for _, x := range e.List {
				bind(x)
			}
		case *syntax.ListExpr:
			for _, x := range e.List {
				bind(x)
			}
		case *syntax.ParenExpr:
			bind(e.X)
		case *syntax.BinaryExpr: // a parameter with a default
			bind(e.X)
		case *syntax.UnaryExpr: // *args, **kwargs
			if e.X != nil {
				bind(e.X)
			}
		}
	}
	syntax.Walk(f, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.AssignStmt:
			bind(n.LHS)
		case *syntax.DefStmt:
			bind(n.Name)
			for _, p := range n.Params {
				bind(p)
			}
		case *syntax.LambdaExpr:
			for _, p := range n.Params {
				bind(p)
			}
		case *syntax.ForStmt:
			bind(n.Vars)
		case *syntax.ForClause:
			bind(n.Vars)
		}
		return true
	})
	return found
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

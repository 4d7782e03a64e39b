package harness

import (
	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// unreadParams reports, for each of the n positional arguments a hook is
// called with, whether fn's body never names the parameter that receives
// it. Such an argument cannot be observed (Starlark has no locals() or
// frame access), so Call need not convert it: most parse_action hooks never
// read their state, and converting the transcript for them was most of the
// cost of calling them. Anything unsure (an argument that lands in *args,
// a parameter not found in f) counts as read.
func unreadParams(f *syntax.File, fn *starlark.Function, n int) []bool {
	positional := fn.NumParams() - fn.NumKwonlyParams()
	if fn.HasVarargs() {
		positional--
	}
	if fn.HasKwargs() {
		positional--
	}
	var out []bool
	for i := 0; i < n && i < positional; i++ {
		name, pos := fn.Param(i)
		body := bodyOf(f, pos)
		if body == nil || names(body, name) {
			continue
		}
		if out == nil {
			out = make([]bool, n)
		}
		out[i] = true
	}
	return out
}

// bodyOf finds the def or lambda that has a parameter at pos and returns
// its body, or nil.
func bodyOf(f *syntax.File, pos syntax.Position) syntax.Node {
	var body syntax.Node
	syntax.Walk(f, func(n syntax.Node) bool {
		if body != nil {
			return false
		}
		var params []syntax.Expr
		var b syntax.Node
		switch x := n.(type) {
		case *syntax.DefStmt:
			params, b = x.Params, &syntax.File{Stmts: x.Body}
		case *syntax.LambdaExpr:
			params, b = x.Params, x.Body
		default:
			return true
		}
		for _, p := range params {
			if id := paramIdent(p); id != nil && id.NamePos == pos {
				body = b
				return false
			}
		}
		return true
	})
	return body
}

// paramIdent is the name a parameter binds: x, x=default, *x or **x.
func paramIdent(p syntax.Expr) *syntax.Ident {
	switch x := p.(type) {
	case *syntax.Ident:
		return x
	case *syntax.BinaryExpr:
		id, _ := x.X.(*syntax.Ident)
		return id
	case *syntax.UnaryExpr:
		id, _ := x.X.(*syntax.Ident)
		return id
	}
	return nil
}

// names reports whether name appears as an identifier anywhere in n,
// nested functions included.
func names(n syntax.Node, name string) bool {
	found := false
	syntax.Walk(n, func(n syntax.Node) bool {
		if id, ok := n.(*syntax.Ident); ok && id.Name == name {
			found = true
		}
		return !found
	})
	return found
}

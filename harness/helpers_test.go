package harness

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.starlark.net/starlark"
)

func mustLoad(t testing.TB, src string, opts Options) *Harness {
	t.Helper()
	h, err := Load("h.star", []byte(src), opts)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return h
}

func loadErr(t *testing.T, src string, opts Options) *LoadError {
	t.Helper()
	_, err := Load("h.star", []byte(src), opts)
	if err == nil {
		t.Fatalf("Load succeeded, want an error\nsource:\n%s", src)
	}
	var le *LoadError
	if !errors.As(err, &le) {
		t.Fatalf("error %T %v, want *LoadError", err, err)
	}
	return le
}

func hookErr(t *testing.T, err error) *HookError {
	t.Helper()
	if err == nil {
		t.Fatal("call succeeded, want an error")
	}
	var he *HookError
	if !errors.As(err, &he) {
		t.Fatalf("error %T %v, want *HookError", err, err)
	}
	return he
}

func wantContains(t *testing.T, what, got string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(got, s) {
			t.Errorf("%s = %q, want it to contain %q", what, got, s)
		}
	}
}

// testContract extends Base with a domain-like constant, a template with two
// fields and helpers, one of which sleeps until its context ends.
func testContract() *Contract {
	return Base().Extend(Contract{
		Name: "test",
		Constants: []ConstSpec{
			{Name: "TOPK", Type: TypeInt, Default: 3, Min: Bound(1), Max: Bound(50), Doc: "Passages per search."},
			{Name: "TEMPERATURE_HINT", Type: TypeFloat, Default: 0.5, Doc: "A float."},
			{Name: "VERBOSE", Type: TypeBool, Default: false, Doc: "A bool."},
			{Name: "STOP_WORDS", Type: TypeList, Default: []string{"a", "the"}, Shape: ListOf{Elem: StringShape}, Doc: "A list."},
			{Name: "ALIASES", Type: TypeDict, Default: map[string]any{"nyc": "New York"}, Doc: "A dict."},
			{Name: "USER_PROMPT", Type: TypeTemplate, Default: "Q: {question}\nBoard: {fen}", Fields: []string{"question", "fen"}, Doc: "Prompt."},
		},
		Helpers: map[string]Builtin{
			"legal_moves": {
				Params: []string{"fen"}, Returns: "list of UCI moves", Doc: "Legal moves of a position.",
				Fn: func(_ context.Context, args []any) (any, error) {
					fen, ok := args[0].(string)
					if !ok {
						return nil, errors.New("fen must be a string")
					}
					if fen == "" {
						return nil, errors.New("empty FEN")
					}
					return []string{"e2e4", "d2d4"}, nil
				},
			},
			"nap": {
				Params: []string{"ms"}, Returns: "None", Doc: "Sleeps ms milliseconds or until the call's deadline.",
				Fn: func(ctx context.Context, args []any) (any, error) {
					ms, _ := args[0].(int64)
					select {
					case <-time.After(time.Duration(ms) * time.Millisecond):
					case <-ctx.Done():
					}
					return nil, nil
				},
			},
			"stubborn_nap": {
				Params: []string{"ms"}, Returns: "None", Doc: "Sleeps ms milliseconds, ignoring the deadline.",
				Fn: func(_ context.Context, args []any) (any, error) {
					ms, _ := args[0].(int64)
					time.Sleep(time.Duration(ms) * time.Millisecond)
					return nil, nil
				},
			},
		},
	})
}

// evalRE evaluates a Starlark expression with the runtime's builtins and
// returns its repr.
func evalExpr(t *testing.T, expr string, opts Options) (string, error) {
	t.Helper()
	h := mustLoad(t, "", opts)
	opts = opts.withDefaults()
	th := &starlark.Thread{Name: "eval"}
	th.SetLocal(localCall, &runner{opts: &opts})
	th.SetMaxExecutionSteps(1_000_000)
	v, err := starlark.EvalOptions(fileOptions, th, "expr", expr, h.predeclared)
	if err != nil {
		return "", err
	}
	return v.String(), nil
}

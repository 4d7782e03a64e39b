// Package harnesstest checks a domain's harness contract from its tests:
// that the contract validates and documents everything it declares, that
// its helpers answer from Starlark as expected, and that its constants
// are type- and range-checked.
package harnesstest

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/whalerun/whale/harness"
)

// CheckDoc fails t unless c validates and its Markdown names every
// constant and helper: the doc is all a proposer learns about them.
func CheckDoc(t *testing.T, c *harness.Contract) {
	t.Helper()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	doc := c.Doc()
	for _, k := range c.Constants {
		if !strings.Contains(doc, "`"+k.Name+"`") {
			t.Errorf("doc does not mention constant %s", k.Name)
		}
	}
	for name := range c.Helpers {
		if !strings.Contains(doc, "`"+name+"(") {
			t.Errorf("doc does not mention helper %s", name)
		}
	}
}

// Eval loads a harness under c whose format_observation returns
// json.encode(expr) with obs bound, and calls it.
func Eval(t *testing.T, c *harness.Contract, expr string, obs map[string]any) (string, error) {
	t.Helper()
	src := "def format_observation(obs):\n    return json.encode(" + expr + ")\n"
	h, err := harness.Load("h.star", []byte(src), harness.Options{Contract: c})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	out, err := h.Call(context.Background(), "format_observation", obs)
	if err != nil {
		return "", err
	}
	return out.(string), nil
}

// HelperCase is one helper call evaluated from Starlark.
type HelperCase struct {
	Name, Expr string
	Obs        map[string]any
	Want       string // the result as JSON; empty when an error is wanted
	WantErr    string // a runtime error mentioning this
}

// RunHelperCases runs each case as a subtest.
func RunHelperCases(t *testing.T, c *harness.Contract, cases []HelperCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			got, err := Eval(t, c, tt.Expr, tt.Obs)
			if tt.WantErr != "" {
				if err == nil || !errors.Is(err, harness.ErrRuntime) || !strings.Contains(err.Error(), tt.WantErr) {
					t.Fatalf("got %s, %v; want a runtime error mentioning %q", got, err, tt.WantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.Want {
				t.Errorf("got %s, want %s", got, tt.Want)
			}
		})
	}
}

// ConstCase is a harness source that sets constants, and either the load
// error it must give or a check of the loaded values.
type ConstCase struct {
	Name, Src string
	WantErr   string // an invalid-harness error mentioning this
	Check     func(h *harness.Harness) bool
}

// RunConstCases loads each case under c as a subtest.
func RunConstCases(t *testing.T, c *harness.Contract, cases []ConstCase) {
	t.Helper()
	for _, tt := range cases {
		t.Run(tt.Name, func(t *testing.T) {
			h, err := harness.Load("h.star", []byte(tt.Src), harness.Options{Contract: c})
			if tt.WantErr != "" {
				if err == nil || !errors.Is(err, harness.ErrInvalid) || !strings.Contains(err.Error(), tt.WantErr) {
					t.Fatalf("err %v, want one mentioning %s", err, tt.WantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.Check != nil && !tt.Check(h) {
				t.Errorf("constants: %v", h.Constants())
			}
		})
	}
}

// H builds a HelperCase; table rows stay one line each.
func H(name, expr string, obs map[string]any, want, wantErr string) HelperCase {
	return HelperCase{Name: name, Expr: expr, Obs: obs, Want: want, WantErr: wantErr}
}

// C builds a ConstCase.
func C(name, src, wantErr string, check func(h *harness.Harness) bool) ConstCase {
	return ConstCase{Name: name, Src: src, WantErr: wantErr, Check: check}
}

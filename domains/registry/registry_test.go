package registry

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/schemas"
)

func TestNamesAndLookup(t *testing.T) {
	if got, want := Names(), []string{"chess", "demo", "math", "searchqa"}; !slices.Equal(got, want) {
		t.Fatalf("Names = %v, want %v", got, want)
	}
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			d, err := Lookup(name, Resources{})
			if err != nil {
				t.Fatal(err)
			}
			if d.Name() != name || d.Contract().Name != name {
				t.Errorf("Lookup(%s) is %s with contract %s", name, d.Name(), d.Contract().Name)
			}
			warnings, err := harness.Check(name+"/h0.star", d.Baseline(), harness.Options{Contract: d.Contract()})
			if err != nil || len(warnings) > 0 {
				t.Errorf("h0 of %s: %v, warnings %v", name, err, warnings)
			}
		})
	}
	_, err := Lookup("poker", Resources{})
	if err == nil || !strings.Contains(err.Error(), `"poker"`) || !strings.Contains(err.Error(), "chess, demo, math, searchqa") {
		t.Errorf("Lookup(poker) err = %v, want one listing the known domains", err)
	}
}

// TestBuiltinHarnesses: every domain's named harnesses load under its
// contract without warnings, "h0" is its Baseline and comes first, and an
// unknown name is an error listing the names.
func TestBuiltinHarnesses(t *testing.T) {
	want := map[string][]string{
		"searchqa": {"h0", "h0-local", "h0-tags"},
		"math":     {"h0", "h0-tags"},
		"chess":    {"h0", "h0-compact"},
		"demo":     {"h0"},
	}
	for name, names := range want {
		t.Run(name, func(t *testing.T) {
			e, err := Get(name)
			if err != nil {
				t.Fatal(err)
			}
			if got := e.HarnessNames(); !slices.Equal(got, names) {
				t.Fatalf("HarnessNames = %v, want %v", got, names)
			}
			d := e.New(Resources{})
			for _, n := range names {
				src, err := e.Harness(n)
				if err != nil {
					t.Fatal(err)
				}
				if n == BaselineHarness && string(src) != string(d.Baseline()) {
					t.Errorf("Harness(h0) is not the Baseline")
				}
				warnings, err := harness.Check(name+"/"+n+".star", src, harness.Options{Contract: d.Contract()})
				if err != nil || len(warnings) > 0 {
					t.Errorf("%s: %v, warnings %v", n, err, warnings)
				}
			}
			_, err = e.Harness("h1")
			if err == nil || !strings.Contains(err.Error(), `"h1"`) || !strings.Contains(err.Error(), strings.Join(names, ", ")) {
				t.Errorf("Harness(h1) err = %v, want one listing %v", err, names)
			}
		})
	}
}

// TestMissingTools checks that a domain built without its tool still plays
// and reports the missing tool as a tool error, not a panic.
func TestMissingTools(t *testing.T) {
	tests := []struct {
		domain, tool, input string
		task                schemas.Task
		want                string
	}{
		{"searchqa", "search", "capital of Australia", schemas.Task{ID: "q", Question: "Capital of Australia?", Answers: []string{"Canberra"}}, "no retriever configured"},
		{"math", "python", "print(1)", schemas.Task{ID: "m", Question: "1?", Answers: []string{"1"}}, "no code runner configured"},
	}
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.domain, func(t *testing.T) {
			d, err := Lookup(tt.domain, Resources{})
			if err != nil {
				t.Fatal(err)
			}
			env, err := d.NewEnv(ctx, tt.task, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := env.Reset(ctx); err != nil {
				t.Fatal(err)
			}
			st, err := env.Step(ctx, harness.Action{Kind: "tool", Tool: tt.tool, Input: tt.input})
			if err != nil || st.ToolError != tt.want || st.Done {
				t.Errorf("Step = %+v, %v; want ToolError %q", st, err, tt.want)
			}
		})
	}
}

// The built-in domains keep the paper's order, and Register refuses what
// would make the table ambiguous or unusable.
func TestRegister(t *testing.T) {
	var names []string
	for _, e := range All() {
		names = append(names, e.Name)
	}
	if want := []string{"searchqa", "math", "chess", "demo"}; !slices.Equal(names[:4], want) {
		t.Errorf("All = %v, want %v first", names, want)
	}
	if e, err := Get("math"); err != nil || e.LearningRate != 1e-7 || !e.Needs(ToolSandbox) || e.Needs(ToolRetriever) {
		t.Errorf("Get(math) = %+v, %v", e, err)
	}
	ok := func(Resources) episode.Domain { return nil }
	for _, tc := range []struct {
		e    Entry
		want string
	}{
		{Entry{Name: "chess", New: ok}, "already registered"},
		{Entry{Name: "", New: ok}, "lowercase letters"},
		{Entry{Name: "Bad Name", New: ok}, "lowercase letters"},
		{Entry{Name: "noctor"}, "no constructor"},
		{Entry{Name: "tooly", New: ok, Tools: []string{"browser"}}, `unknown tool "browser"`},
	} {
		if err := Register(tc.e); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Register(%+v) = %v, want an error saying %q", tc.e, err, tc.want)
		}
	}
}

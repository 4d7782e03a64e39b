package harness

import (
	"strings"
	"testing"
)

func TestWithDefaultKeepsSpec(t *testing.T) {
	base := Base()
	orig, _ := base.Const("MAX_TURNS")
	k := base.WithDefault("MAX_TURNS", 9)
	if k.Default != 9 || k.Type != orig.Type || k.Min != orig.Min || k.Max != orig.Max || k.Doc != orig.Doc {
		t.Fatalf("WithDefault changed more than the default: %+v vs %+v", k, orig)
	}
	if again, _ := base.Const("MAX_TURNS"); again.Default != orig.Default {
		t.Fatal("WithDefault changed the base contract")
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "NO_SUCH") {
			t.Fatalf("recover() = %v, want a panic naming NO_SUCH", r)
		}
	}()
	base.WithDefault("NO_SUCH", 1)
}

func TestStringArg(t *testing.T) {
	if s, err := StringArg([]any{1, "x"}, 1, "text"); err != nil || s != "x" {
		t.Fatalf("got %q, %v", s, err)
	}
	if _, err := StringArg([]any{3}, 0, "text"); err == nil || !strings.Contains(err.Error(), "text: want a string, got int") {
		t.Fatalf("err %v", err)
	}
}

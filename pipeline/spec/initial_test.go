package spec

import (
	"strings"
	"testing"

	"github.com/whalerun/whale/domains/registry"
)

// TestHarnessInitial: harness.initial takes "h0", a built-in name of the
// experiment's domain (its source, for init to archive) or a harness id;
// anything else is an error naming the field and the domain's harnesses.
func TestHarnessInitial(t *testing.T) {
	id := "sha256:" + strings.Repeat("ab", 32)
	tests := []struct {
		domain, initial string
		builtin         string // the registry name whose source BuiltinInitial returns
		err             []string
	}{
		{"math", "h0", "", nil},
		{"math", "h0-tags", "h0-tags", nil},
		{"searchqa", "h0-tags", "h0-tags", nil},
		{"chess", "h0-compact", "h0-compact", nil},
		{"chess", id, "", nil},
		{"chess", "h0-tags", "", []string{"field harness.initial", `domain chess has no built-in harness "h0-tags"`, "h0, h0-compact", "sha256:<hex>"}},
		{"demo", "h0-tags", "", []string{"field harness.initial", `"h0-tags"`, "its harnesses are h0,"}},
		{"math", "sha256:abc", "", []string{"field harness.initial", "want sha256:<64 hex digits>"}},
	}
	for _, tt := range tests {
		t.Run(tt.domain+"/"+tt.initial, func(t *testing.T) {
			src := strings.Replace(minimal, "domain: math", "domain: "+tt.domain, 1)
			src = strings.Replace(src, "  proposer: mutate", "  proposer: mutate\n  initial: "+tt.initial, 1)
			if tt.domain == "searchqa" {
				src += "tools:\n  retriever: http://127.0.0.1:8001\n"
			}
			e, err := Parse("experiment.yaml", []byte(src))
			if tt.err != nil {
				if err == nil {
					t.Fatal("accepted")
				}
				for _, w := range tt.err {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, ok, err := e.BuiltinInitial()
			if err != nil || ok != (tt.builtin != "") {
				t.Fatalf("BuiltinInitial = ok %v, err %v", ok, err)
			}
			if ok {
				dom, _ := registry.Get(tt.domain)
				want, _ := dom.Harness(tt.builtin)
				if string(got) != string(want) {
					t.Errorf("BuiltinInitial returned another source than %s's %s", tt.domain, tt.builtin)
				}
			}
		})
	}
}

package propose

import (
	"slices"
	"strings"
	"testing"
)

// The table's names are the exported constants, in order, each once.
func TestBackendsTable(t *testing.T) {
	if got, want := Backends(), []string{BackendMutate, BackendArchive, BackendLLM, BackendAgent}; !slices.Equal(got, want) {
		t.Fatalf("Backends() = %v, want %v", got, want)
	}
	for _, b := range backends {
		if b.name == "" || b.propose == nil {
			t.Errorf("row %+v: want a name and a propose func", b)
		}
	}
	for name, want := range map[string]bool{BackendMutate: false, BackendArchive: false, BackendLLM: true, BackendAgent: false, "magic": false, "": false} {
		if got := UsesLLM(name); got != want {
			t.Errorf("UsesLLM(%q) = %v, want %v", name, got, want)
		}
	}
}

// An unknown backend is refused with the table's names, in order.
func TestBackendUnknownListsKnown(t *testing.T) {
	cfg := mutateConfig(3)
	cfg.Backend = "magic"
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), `backend "magic": want mutate, archive, llm or agent`) {
		t.Fatalf("Validate() = %v", err)
	}
	rest := err.Error()
	for _, name := range Backends() {
		i := strings.Index(rest, name)
		if i < 0 {
			t.Fatalf("error does not list %q in the table's order: %v", name, err)
		}
		rest = rest[i+len(name):]
	}
}

// Every row of the table accepts a config that gives its settings, and
// names its proposer.
func TestBackendsAccepted(t *testing.T) {
	labels := map[string]string{BackendMutate: "mutate", BackendArchive: "archive", BackendLLM: "llm:proposer", BackendAgent: "agent"}
	for _, name := range Backends() {
		cfg := Config{Backend: name, M: 3, Parent: ParentH0, Iteration: 1, Domain: "fake",
			AgentCommand: "true", LLM: LLMConfig{Model: "proposer"}}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: Validate() = %v", name, err)
		}
		b, err := backendFor(name)
		if err != nil {
			t.Fatalf("backendFor(%q) = %v", name, err)
		}
		if got := b.proposer(cfg); got != labels[name] {
			t.Errorf("%s: proposer %q, want %q", name, got, labels[name])
		}
	}
}

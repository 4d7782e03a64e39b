package finetune

import (
	"slices"
	"strings"
	"testing"
)

// The table's names are the exported constants, in order, each once; an
// empty backend is the first.
func TestBackendsTable(t *testing.T) {
	if got, want := Backends(), []string{BackendCommand, BackendLocal}; !slices.Equal(got, want) {
		t.Fatalf("Backends() = %v, want %v", got, want)
	}
	for _, b := range backends {
		if b.name == "" || b.train == nil {
			t.Errorf("row %q: want a name and a train func", b.name)
		}
	}
	if b, err := backendFor(""); err != nil || b.name != BackendCommand {
		t.Errorf(`backendFor("") = %q, %v; want %q`, b.name, err, BackendCommand)
	}
}

// An unknown backend is refused with the table's names, in order.
func TestBackendUnknownListsKnown(t *testing.T) {
	cfg := baseConfig("true")
	cfg.Backend = "torchtune"
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), `backend "torchtune": want "command" or "local"`) {
		t.Fatalf("Validate() = %v", err)
	}
	rest := err.Error()
	for _, name := range Backends() {
		i := strings.Index(rest, `"`+name+`"`)
		if i < 0 {
			t.Fatalf("error does not list %q in the table's order: %v", name, err)
		}
		rest = rest[i+len(name):]
	}
}

// Every row of the table accepts a config that gives its settings, and
// checks its own: command needs a command, local trains all weights.
func TestBackendsAccepted(t *testing.T) {
	for _, name := range Backends() {
		cfg := baseConfig("true")
		cfg.Backend = name
		cfg.LoRA = false
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: Validate() = %v", name, err)
		}
	}
	cfg := baseConfig(" ")
	cfg.Backend = BackendLocal
	cfg.LoRA = false
	if err := cfg.Validate(); err != nil {
		t.Errorf("local without a command: Validate() = %v", err)
	}
	cfg.LoRA = true
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "lora: the local backend trains all weights") {
		t.Errorf("local with lora: Validate() = %v", err)
	}
	cfg.Backend = ""
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "command is empty") {
		t.Errorf("default backend without a command: Validate() = %v", err)
	}
}

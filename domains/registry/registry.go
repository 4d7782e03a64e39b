package registry

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/whalerun/whale/domains/chess"
	"github.com/whalerun/whale/domains/demo"
	mathdomain "github.com/whalerun/whale/domains/math"
	"github.com/whalerun/whale/domains/searchqa"
	"github.com/whalerun/whale/episode"
)

// Resources are the outside tools domains call from their environments.
// Either may be nil; see the package doc.
type Resources struct {
	// Retriever answers searches (Tool Retriever).
	Retriever searchqa.Retriever
	// CodeRunner runs model-written Python (Tool Sandbox).
	CodeRunner mathdomain.CodeRunner
}

// The outside tools a domain may need (Entry.Tools); each is configured by
// the experiment's tools.<name> and built into Resources.
const (
	// ToolRetriever: tools.retriever, a Search-R1 retrieval server or a
	// stored index. An experiment of a domain that needs it must set it.
	ToolRetriever = "retriever"
	// ToolSandbox: tools.sandbox, "local" (the default) or a
	// SandboxFusion URL.
	ToolSandbox = "sandbox"
)

// Entry is one domain: everything whale knows of it outside its package.
type Entry struct {
	// Name is the domain's name in experiment files and task rows.
	Name string
	// New builds the domain wired to the tools in res.
	New func(res Resources) episode.Domain
	// LearningRate is the RSFT learning rate of the domain's experiments
	// when the file sets none.
	LearningRate float64
	// Tools are the outside tools its environments call (ToolRetriever,
	// ToolSandbox).
	Tools []string
	// Local marks a domain made for the built-in model: its experiments
	// default to provider local (when they name no endpoint) and the
	// offline mutate proposer.
	Local bool
	// Harnesses returns the domain's built-in harnesses by name (the
	// names harness.initial may give); nil means the one harness "h0",
	// the domain's Baseline. "h0" is always the Baseline.
	Harnesses func() map[string][]byte
}

// BaselineHarness is the name of a domain's default harness, its
// Baseline: the id "h0" every stage knows.
const BaselineHarness = "h0"

// HarnessNames lists the domain's built-in harnesses, "h0" first, then
// the others sorted.
func (e Entry) HarnessNames() []string {
	names := []string{BaselineHarness}
	if e.Harnesses != nil {
		for n := range e.Harnesses() {
			if n != BaselineHarness {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names[1:])
	return names
}

// Harness returns the source of the built-in harness called name; an
// unknown name is an error listing the domain's names.
func (e Entry) Harness(name string) ([]byte, error) {
	if name == BaselineHarness {
		return e.New(Resources{}).Baseline(), nil
	}
	if e.Harnesses != nil {
		if src, ok := e.Harnesses()[name]; ok {
			return src, nil
		}
	}
	return nil, fmt.Errorf("domain %s has no built-in harness %q: its harnesses are %s", e.Name, name, strings.Join(e.HarnessNames(), ", "))
}

// Needs reports whether the domain's environments call tool.
func (e Entry) Needs(tool string) bool { return slices.Contains(e.Tools, tool) }

var (
	mu      sync.RWMutex
	entries []Entry // in the order registered
)

func init() {
	for _, e := range []Entry{
		// The paper's domains in its order, with its learning rates.
		{Name: "searchqa", New: func(r Resources) episode.Domain { return searchqa.NewDomain(r.Retriever) }, LearningRate: 1e-6,
			Tools: []string{ToolRetriever}, Harnesses: searchqa.Harnesses},
		{Name: "math", New: func(r Resources) episode.Domain { return mathdomain.NewDomain(r.CodeRunner) }, LearningRate: 1e-7,
			Tools: []string{ToolSandbox}, Harnesses: mathdomain.Harnesses},
		{Name: "chess", New: func(Resources) episode.Domain { return chess.NewDomain() }, LearningRate: 1e-7, Harnesses: chess.Harnesses},
		// The built-in model learns at its own scale.
		{Name: "demo", New: func(Resources) episode.Domain { return demo.NewDomain() }, LearningRate: 1e-3, Local: true},
	} {
		if err := Register(e); err != nil {
			panic(err)
		}
	}
}

// Register adds a domain. A name that is taken, empty or not a lowercase
// word, or an entry without New, is an error.
func Register(e Entry) error {
	if e.Name == "" || strings.Trim(e.Name, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
		return fmt.Errorf("register domain %q: a name is lowercase letters, digits and '-'", e.Name)
	}
	if e.New == nil {
		return fmt.Errorf("register domain %s: no constructor", e.Name)
	}
	for _, t := range e.Tools {
		if t != ToolRetriever && t != ToolSandbox {
			return fmt.Errorf("register domain %s: unknown tool %q (known: %s, %s)", e.Name, t, ToolRetriever, ToolSandbox)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if slices.ContainsFunc(entries, func(x Entry) bool { return x.Name == e.Name }) {
		return fmt.Errorf("register domain %s: already registered", e.Name)
	}
	entries = append(entries, e)
	return nil
}

// All lists the registered domains in the order registered: the paper's
// three in its order, then demo, then any registered later.
func All() []Entry {
	mu.RLock()
	defer mu.RUnlock()
	return slices.Clone(entries)
}

// Names lists the registered domains' names, sorted.
func Names() []string {
	var names []string
	for _, e := range All() {
		names = append(names, e.Name)
	}
	slices.Sort(names)
	return names
}

// Get returns the entry of the domain called name; an unknown name is an
// error listing the known ones.
func Get(name string) (Entry, error) {
	for _, e := range All() {
		if e.Name == name {
			return e, nil
		}
	}
	return Entry{}, &unknownError{fmt.Sprintf("unknown domain %q: known domains are %s", name, strings.Join(Names(), ", "))}
}

// ErrUnknown is what Get's and Lookup's error for a name that is not
// registered wraps.
var ErrUnknown = errors.New("unknown domain")

type unknownError struct{ msg string }

func (e *unknownError) Error() string        { return e.msg }
func (e *unknownError) Is(target error) bool { return target == ErrUnknown }

// Lookup returns the domain called name, using the tools in res.
func Lookup(name string, res Resources) (episode.Domain, error) {
	e, err := Get(name)
	if err != nil {
		return nil, err
	}
	return e.New(res), nil
}

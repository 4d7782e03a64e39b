package registry

import (
	"fmt"
	"slices"
	"strings"

	"github.com/whalerun/whale/domains/chess"
	"github.com/whalerun/whale/domains/demo"
	mathdomain "github.com/whalerun/whale/domains/math"
	"github.com/whalerun/whale/domains/searchqa"
	"github.com/whalerun/whale/episode"
)

// Resources are the outside tools domains call from their environments.
// Either may be nil; see the package doc.
type Resources struct {
	// Retriever answers the searchqa domain's searches.
	Retriever searchqa.Retriever
	// CodeRunner runs the math domain's Python.
	CodeRunner mathdomain.CodeRunner
}

var domains = map[string]func(Resources) episode.Domain{
	"chess":    func(Resources) episode.Domain { return chess.NewDomain() },
	"demo":     func(Resources) episode.Domain { return demo.NewDomain() },
	"math":     func(r Resources) episode.Domain { return mathdomain.NewDomain(r.CodeRunner) },
	"searchqa": func(r Resources) episode.Domain { return searchqa.NewDomain(r.Retriever) },
}

// Names lists the domains Lookup knows, sorted.
func Names() []string {
	names := make([]string, 0, len(domains))
	for n := range domains {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Lookup returns the domain called name, using the tools in res.
func Lookup(name string, res Resources) (episode.Domain, error) {
	f, ok := domains[name]
	if !ok {
		return nil, fmt.Errorf("unknown domain %q: known domains are %s", name, strings.Join(Names(), ", "))
	}
	return f(res), nil
}

package propose

import (
	"context"
	"fmt"

	"github.com/whalerun/whale/internal/choice"
	"github.com/whalerun/whale/stages"
)

// Backends.
const (
	BackendMutate  = "mutate"
	BackendArchive = "archive"
	BackendLLM     = "llm"
	BackendAgent   = "agent"
)

// backend is one row of the table of proposers: everything the stage
// knows about a backend by its name. Adding a proposer is its file and
// one row here (and, in pipeline/spec, the experiment fields of its
// settings, if it has any).
type backend struct {
	name string
	// check reports what is wrong with the backend's own settings in c;
	// nil when it has none. Its errors come after the common ones.
	check func(c Config) []error
	// label names the proposer in every candidate and rejection; nil
	// means the backend's name.
	label func(c Config) string
	// episodes: the backend reads the archive's sampled episodes (the
	// rollouts of its evaluate stages), which costs a read of their
	// rollouts.parquet.
	episodes bool
	// usesLLM: the backend asks Stage.LLM, a client of Config.LLM.Model
	// (see UsesLLM).
	usesLLM bool
	// propose, called as a method of the stage, comes up with proposals
	// for in.cfg.M slots: the proposals, in order, and the slots it could
	// not fill, already rejected; it may add summary entries and write
	// files of its own through x (agent.log). It returns an error only
	// when it cannot work at all (a model call that failed after its
	// retries, a command that cannot start): the stage then fails and
	// commits nothing.
	propose func(s *Stage, ctx context.Context, x *stages.Exec, in *input) (outcome, error)
}

// backends is the table of proposers, in the order Backends lists them.
var backends = []backend{
	{name: BackendMutate, propose: (*Stage).proposeMutate},
	// The archive backend streams every rollout itself (readHistory).
	{name: BackendArchive, propose: (*Stage).proposeArchive},
	{name: BackendLLM, check: Config.checkLLM, label: llmLabel, episodes: true, usesLLM: true, propose: (*Stage).llm},
	// The agent reads every episode: writeTrajectories streams them.
	{name: BackendAgent, check: Config.checkAgent, propose: (*Stage).agent},
}

// Backends lists the names of the propose backends (Config.Backend) in
// the table's order.
func Backends() []string { return choice.Names(backends) }

// Name is the backend's name (choice.Named).
func (b backend) Name() string { return b.name }

// UsesLLM reports whether the backend called name asks a chat model: its
// stage needs Stage.LLM, a client of Config.LLM.Model. It is false for
// an unknown name.
func UsesLLM(name string) bool {
	b, err := backendFor(name)
	return err == nil && b.usesLLM
}

// backendFor returns the row of the backend called name; an unknown name
// is an error that lists the known ones.
func backendFor(name string) (backend, error) {
	b, ok := choice.Find(backends, name)
	if !ok {
		return backend{}, fmt.Errorf("backend %q: want %s", name, choice.OrList(Backends()))
	}
	return b, nil
}

// proposer is the label of b's candidates and rejections under cfg.
func (b backend) proposer(cfg Config) string {
	if b.label == nil {
		return b.name
	}
	return b.label(cfg)
}

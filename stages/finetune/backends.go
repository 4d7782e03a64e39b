package finetune

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/whalerun/whale/internal/choice"
	"github.com/whalerun/whale/stages"
)

// Backends.
const (
	BackendCommand = "command"
	BackendLocal   = "local"
)

// backend is one row of the table of finetune backends: everything the
// stage knows about a backend by its name. Adding a backend is its file
// and one row here (and, in pipeline/spec, the experiment fields of its
// settings, if it has any).
type backend struct {
	name string
	// check reports what is wrong with the backend's own settings in c;
	// nil when it has none.
	check func(c Config) []error
	// train, called as a method of the stage, trains j.base on the SFT
	// table in j.sftDir and leaves the new checkpoint in j.outDir, which
	// the stage then uploads. It returns the new model's id: j.modelID,
	// unless the backend names its own (a trainer may still override it
	// with $WHALE_OUTPUT_DIR/whale_model_id). An error is a failed
	// training, which Config.OnFailure handles.
	train func(st *Stage, ctx context.Context, j *job) (modelID string, err error)
}

// backends is the table of finetune backends, in the order Backends lists
// them.
var backends = []backend{
	{name: BackendCommand, check: Config.checkCommand, train: (*Stage).trainCommand},
	{name: BackendLocal, check: Config.checkLocal, train: (*Stage).trainLocal},
}

// Backends lists the names of the finetune backends (Config.Backend) in
// the table's order; an empty Config.Backend is the first.
func Backends() []string { return choice.Names(backends) }

// Name is the backend's name (choice.Named).
func (b backend) Name() string { return b.name }

// backendFor returns the row of the backend called name ("" is the
// first, command); an unknown name is an error that lists the known ones.
func backendFor(name string) (backend, error) {
	if name == "" {
		return backends[0], nil
	}
	b, ok := choice.Find(backends, name)
	if !ok {
		quoted := make([]string, len(backends))
		for j, b := range backends {
			quoted[j] = fmt.Sprintf("%q", b.name)
		}
		return backend{}, fmt.Errorf("backend %q: want %s", name, choice.OrList(quoted))
	}
	return b, nil
}

// job is one training, as a backend sees it.
type job struct {
	log      *slog.Logger
	x        *stages.Exec
	cfg      Config
	examples int64  // rows of the SFT table (> 0)
	sftDir   string // the SFT table's Parquet files ($WHALE_SFT_PARQUET)
	base     string // a local directory (a base from the bucket) or Config.BaseCheckpoint
	outDir   string // an empty directory for the new checkpoint
	modelID  string // the new model's default id
	// env holds the WHALE_* variables of a trainer command (see Config).
	env map[string]string
}

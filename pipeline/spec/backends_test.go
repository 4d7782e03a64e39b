package spec

import (
	"slices"
	"strings"
	"testing"

	"github.com/whalerun/whale/stages/finetune"
	"github.com/whalerun/whale/stages/propose"
)

// backendsBase is an experiment without its model, harness and finetune
// blocks, which each case adds.
const backendsBase = `name: t1
domain: math
data: {train: datasets/a, search: datasets/b, test: datasets/c}
budget: {weight_steps: 10}
`

const servedModel = "model: {name: m, endpoints: ['http://127.0.0.1:8000/v1']}\n"

// Every proposer of the stage's table is accepted, given its settings: a
// new row of propose.Backends() needs a line here (and spec fields and
// proposerChecks for its settings, if it has any).
func TestEveryProposerAccepted(t *testing.T) {
	settings := map[string]string{
		ProposerMutate:  "harness: {proposer: mutate}\n",
		ProposerArchive: "harness: {proposer: archive}\n",
		ProposerLLM:     "harness: {proposer: llm, llm: {name: big, endpoints: ['http://127.0.0.1:8001/v1']}}\n",
		ProposerAgent:   "harness: {proposer: agent, agent: {command: 'my-agent --yes'}}\n",
	}
	for _, name := range propose.Backends() {
		h, ok := settings[name]
		if !ok {
			t.Errorf("proposer %s: no case here; add its settings", name)
			continue
		}
		src := backendsBase + servedModel + h + "finetune: {command: train.sh, reload: none}\n"
		e, err := Parse("experiment.yaml", []byte(src))
		if err != nil {
			t.Errorf("proposer %s: %v", name, err)
			continue
		}
		if e.Harness.Proposer != name {
			t.Errorf("proposer %s: parsed as %q", name, e.Harness.Proposer)
		}
	}
}

// Every finetune backend of the stage's table is accepted, given its
// settings.
func TestEveryFinetuneBackendAccepted(t *testing.T) {
	settings := map[string]string{
		FinetuneCommand: servedModel + "finetune: {backend: command, command: train.sh, reload: none}\n",
		FinetuneLocal:   "model: {provider: local, name: m, checkpoint: base.wlm}\nfinetune: {backend: local}\n",
	}
	for _, name := range finetune.Backends() {
		s, ok := settings[name]
		if !ok {
			t.Errorf("finetune backend %s: no case here; add its settings", name)
			continue
		}
		src := backendsBase + "harness: {proposer: mutate}\n" + s
		e, err := Parse("experiment.yaml", []byte(src))
		if err != nil {
			t.Errorf("finetune backend %s: %v", name, err)
			continue
		}
		if e.Finetune.Backend != name {
			t.Errorf("finetune backend %s: parsed as %q", name, e.Finetune.Backend)
		}
	}
}

// An unknown name is refused with the names of the stage's table, in
// order.
func TestUnknownBackendListsKnown(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{"proposer", backendsBase + servedModel + "harness: {proposer: magic}\nfinetune: {command: train.sh, reload: none}\n",
			`field harness.proposer: must be one of ` + strings.Join(propose.Backends(), ", ") + `; got "magic"`},
		{"finetune", backendsBase + servedModel + "harness: {proposer: mutate}\nfinetune: {backend: torchtune, command: train.sh, reload: none}\n",
			`field finetune.backend: must be one of ` + strings.Join(finetune.Backends(), ", ") + `; got "torchtune"`},
	}
	for _, c := range cases {
		_, err := Parse("experiment.yaml", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
	// The lists themselves, as users read them.
	if got := strings.Join(propose.Backends(), ", "); got != "mutate, archive, llm, agent" {
		t.Errorf("proposers %q", got)
	}
	if got := strings.Join(finetune.Backends(), ", "); got != "command, local" {
		t.Errorf("finetune backends %q", got)
	}
}

// The spec's checks of backend settings name only backends of the stage
// tables, and its names are theirs.
func TestBackendChecksNameTableRows(t *testing.T) {
	for name := range proposerChecks {
		if !slices.Contains(propose.Backends(), name) {
			t.Errorf("proposerChecks[%q]: not a propose backend (%v)", name, propose.Backends())
		}
	}
	for name := range finetuneChecks {
		if !slices.Contains(finetune.Backends(), name) {
			t.Errorf("finetuneChecks[%q]: not a finetune backend (%v)", name, finetune.Backends())
		}
	}
	for _, name := range []string{ProposerMutate, ProposerArchive, ProposerLLM, ProposerAgent} {
		if !slices.Contains(propose.Backends(), name) {
			t.Errorf("Proposer constant %q: not a propose backend", name)
		}
	}
	for _, name := range []string{FinetuneCommand, FinetuneLocal} {
		if !slices.Contains(finetune.Backends(), name) {
			t.Errorf("Finetune constant %q: not a finetune backend", name)
		}
	}
}

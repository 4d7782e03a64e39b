package pipeline

import (
	"slices"
	"testing"

	"github.com/whalerun/whale/pipeline/spec"
)

// The agent proposer is told every variable the experiment names for a
// key, so that their values are scrubbed whatever the variables are called.
func TestKeyVars(t *testing.T) {
	e := &spec.Experiment{}
	e.Model.APIKeyEnv = "LLM_BEARER"
	e.Harness.LLM.APIKeyEnv = "PROPOSER_KEY"
	e.Tools.RetrieverAPIKeyEnv = "RETRIEVER"
	e.Harness.Agent.Env = []string{"ANTHROPIC_API_KEY"}
	got := (&Runner{Planner: Planner{Spec: e}}).keyVars()
	if want := []string{"LLM_BEARER", "PROPOSER_KEY", "RETRIEVER", "ANTHROPIC_API_KEY"}; !slices.Equal(got, want) {
		t.Errorf("keyVars = %v, want %v", got, want)
	}
	if got := (&Runner{Planner: Planner{Spec: &spec.Experiment{}}}).keyVars(); len(got) != 0 {
		t.Errorf("no key variables: %v", got)
	}
}

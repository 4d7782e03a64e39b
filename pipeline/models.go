package pipeline

import (
	"fmt"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/stages/evaluate"
	"github.com/whalerun/whale/stages/propose"
	"github.com/whalerun/whale/stages/rollout"
)

// modelFor returns a client that asks for the model called name: the
// runtime's own when it asks for that name already, otherwise a client of
// the same endpoints for the other name — after a LoRA hand-off the
// server serves the new checkpoint under its model id, next to the base.
func (r *Runner) modelFor(name string) (episode.Chatter, error) {
	if m, ok := r.Runtime.Model.(interface{ Model() string }); ok && m.Model() == name {
		return r.Runtime.Model, nil
	}
	m := r.Spec.Model
	endpoints := m.Endpoints
	if len(r.Runtime.ModelEndpoints) > 0 {
		endpoints = r.Runtime.ModelEndpoints
	}
	c, err := models.New(models.Config{
		Endpoints:   endpoints,
		Model:       name,
		APIKeyEnv:   m.APIKeyEnv,
		Concurrency: m.Concurrency,
		Extra:       m.Extra,
		Logger:      r.log(),
	})
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", name, err)
	}
	return c, nil
}

// useModel points a stage that calls the target model at model name.
func (r *Runner) useModel(st stages.Stage, name string) error {
	if name == "" {
		return nil
	}
	var slot *episode.Chatter
	switch s := st.(type) {
	case *rollout.Stage:
		slot = &s.Model
	case *evaluate.Stage:
		slot = &s.Model
	case *propose.Stage:
		slot = &s.Model // the agent's prototypes
	default:
		return nil
	}
	m, err := r.modelFor(name)
	if err != nil {
		return err
	}
	*slot = m
	return nil
}

package pipeline

import (
	"context"
	"fmt"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/pipeline/spec"
	"github.com/whalerun/whale/stages"
	"github.com/whalerun/whale/stages/evaluate"
	"github.com/whalerun/whale/stages/propose"
	"github.com/whalerun/whale/stages/rollout"
)

// modelFor returns a client for the model whose id is name: the
// runtime's own when it asks for that name already, otherwise a client of
// the same endpoints for the other name — after a LoRA hand-off (or a
// restart by reload: command) the servers serve the new checkpoint under
// its model id. After a vllm-weights hand-off they serve it under their
// own name, model.name: vLLM's reload_weights replaces the weights and
// keeps --served-model-name. The client then asks for model.name and
// reports the answers as name's (servedAs), so the rows record which
// checkpoint answered.
func (r *Runner) modelFor(name string) (episode.Chatter, error) {
	if m, ok := r.Runtime.Model.(interface{ Model() string }); ok && m.Model() == name {
		return r.Runtime.Model, nil
	}
	m := r.Spec.Model
	if r.Spec.Finetune.Reload == spec.ReloadVLLMWeights && name != m.Name {
		c, err := r.modelFor(m.Name)
		if err != nil {
			return nil, err
		}
		return &servedAs{c: c, served: m.Name, id: name}, nil
	}
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

// servedAs is the client of a server that serves checkpoint id under the
// name served (a vllm-weights hand-off): it asks for served and reports
// id as the model of every answer the server gave as served's.
type servedAs struct {
	c          episode.Chatter
	served, id string
}

// Model is the id the stage's config names and its rows record.
func (s *servedAs) Model() string { return s.id }

func (s *servedAs) Chat(ctx context.Context, req models.Request) (*models.Response, error) {
	resp, err := s.c.Chat(ctx, req)
	if resp != nil && (resp.Model == s.served || resp.Model == "") {
		resp.Model = s.id
	}
	return resp, err
}

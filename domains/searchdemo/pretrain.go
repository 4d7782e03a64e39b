package searchdemo

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/whalerun/whale/domains/demo"
	"github.com/whalerun/whale/domains/searchqa"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/models/local"
	"github.com/whalerun/whale/schemas"
)

// Config is the search demo's model: the arithmetic demo's shape with a
// 512-byte context: a whole episode (the tools turn, the question, a
// call, three passages, the answer) is about 350 bytes, and a harness
// may add prompt lines.
func Config() local.Config {
	c := local.DemoConfig()
	c.Context = 512
	return c
}

// StartHarness is the name of the demo's starting harness in the searchqa
// domain (domains/searchqa/h0-local.star).
const StartHarness = "h0-local"

// Tools are the native tools h0-local offers, as the chat template
// renders them: pretraining shows the model the same tools turn its
// rollouts will.
func Tools() ([]local.Tool, error) {
	src, ok := searchqa.Harnesses()[StartHarness]
	if !ok {
		return nil, fmt.Errorf("search demo: searchqa has no harness %s", StartHarness)
	}
	h, err := harness.Load(StartHarness+".star", src, harness.Options{Contract: searchqa.Contract()})
	if err != nil {
		return nil, fmt.Errorf("search demo: %w", err)
	}
	var out []local.Tool
	for _, t := range h.Tools() {
		params, err := json.Marshal(t.Parameters)
		if err != nil {
			return nil, fmt.Errorf("search demo: tool %s: %w", t.Name, err)
		}
		out = append(out, local.Tool{Name: t.Name, Description: t.Description, Parameters: params})
	}
	return out, nil
}

// Pretraining noise. The model learns the skill the weights own (call
// the tool with the name, copy the asked fact out of the passages) as a
// distribution whose mode is right, so sampled at temperature 1 it often
// slips and RSFT on its verified answers has something to sharpen.
const (
	noSearchRate = 0.08 // replies that answer at once, a guess
	typoRate     = 0.08 // searches for a misspelt name ("No results.")
	answerNoise  = 0.15 // answers other than the shown fact asked for
	toolsRate    = 0.9  // conversations that list the tools (a long prompt may lose them)
)

// NoResults is what h0-local shows for a search that found nothing.
const NoResults = "No results."

// Conversation is one pretraining example about an invented entity the
// world does not hold: the question of one relation, a search for the
// name (or, rarely, a guess or a misspelt name), the passages h0-local
// would show for some TOPK in 1..3 in a random order, and the answer:
// the asked fact when it is shown, else a guess or a shown value. It
// reports whether the conversation lists the tools.
func (w *World) Conversation(rng *rand.Rand) (msgs []schemas.Message, withTools bool) {
	name := personName(rng)
	for w.Known(name) {
		name = personName(rng)
	}
	e := drawEntity(rng, name)
	for w.Known(e.Values[0]) {
		e.Values[0] = townName(rng)
	}
	r := rng.IntN(len(Relations))
	withTools = rng.Float64() < toolsRate
	// Most conversations use h0-local's layout (no system prompt, the bare
	// question); the rest carry a prompt line the mutate proposer may add.
	if rng.Float64() < 0.3 {
		msgs = append(msgs, schemas.Message{Role: "system", Content: demo.NoiseSentences[rng.IntN(len(demo.NoiseSentences))]})
	}
	user := fmt.Sprintf(Relations[r].Question, name)
	if rng.IntN(8) == 0 {
		user += "\n" + demo.UserSuffixes[rng.IntN(len(demo.UserSuffixes))]
	}
	msgs = append(msgs, schemas.Message{Role: "user", Content: user})
	if rng.Float64() < noSearchRate {
		return append(msgs, answer(w.guess(rng, r))), withTools
	}
	query := name
	if rng.Float64() < typoRate {
		query = typo(rng, name)
	}
	args, _ := json.Marshal(map[string]string{"query": query})
	msgs = append(msgs, schemas.Message{Role: "assistant", ToolCalls: []schemas.ToolCall{{ID: "call-1", Name: searchqa.ToolSearch, Arguments: string(args)}}})
	var shown []int
	result := NoResults
	if query == name {
		shown = rng.Perm(len(Relations))[:1+rng.IntN(len(Relations))]
		lines := make([]string, len(shown))
		for i, s := range shown {
			lines[i] = e.Passage(s)
		}
		result = strings.Join(lines, "\n")
	}
	msgs = append(msgs, schemas.Message{Role: "tool", ToolCallID: "call-1", Content: result})
	var others []string
	asked := false
	for _, s := range shown {
		if s == r {
			asked = true
		} else {
			others = append(others, e.Values[s])
		}
	}
	switch {
	case asked && rng.Float64() >= answerNoise:
		return append(msgs, answer(e.Values[r])), withTools
	case len(others) > 0 && rng.IntN(2) == 0:
		return append(msgs, answer(others[rng.IntN(len(others))])), withTools
	}
	return append(msgs, answer(w.guess(rng, r))), withTools
}

func answer(v string) schemas.Message {
	return schemas.Message{Role: "assistant", Content: "<answer>" + v + "</answer>"}
}

// guess is a value of relation r drawn without knowledge (never a town
// of the world).
func (w *World) guess(rng *rand.Rand, r int) string {
	switch Relations[r].Name {
	case "home":
		town := townName(rng)
		for w.Known(town) {
			town = townName(rng)
		}
		return town
	case "pet":
		return animals[rng.IntN(len(animals))]
	}
	return colors[rng.IntN(len(colors))]
}

// typo changes one letter after the first.
func typo(rng *rand.Rand, s string) string {
	b := []byte(s)
	i := 1 + rng.IntN(len(b)-1)
	c := b[i]
	for c == b[i] {
		c = "abdeiklmnorstuvz"[rng.IntN(16)]
	}
	b[i] = c
	return string(b)
}

// PretrainOptions configure Pretrain; zero fields take DefaultPretrain's.
type PretrainOptions = local.PretrainOptions

// DefaultPretrain are the options of testdata/pretrained.wlm.
var DefaultPretrain = PretrainOptions{Seed: 1, Steps: 4800, Batch: 32, LR: 3e-3, Warmup: 60, LogEvery: 100}

// Pretrain makes the search demo's starting model from scratch
// (local.Pretrain of Config) on Conversations about invented entities:
// the world's own entities never appear, so whatever the model knows of
// a test entity it must have searched for.
func Pretrain(ctx context.Context, o PretrainOptions) (*local.Model, error) {
	o = o.Or(DefaultPretrain)
	tools, err := Tools()
	if err != nil {
		return nil, err
	}
	w := NewWorld()
	cfg := Config()
	return local.Pretrain(ctx, cfg, o, func(rng *rand.Rand) (local.Example, bool, error) {
		conv, withTools := w.Conversation(rng)
		var ts []local.Tool
		if withTools {
			ts = tools
		}
		toks, mask, err := local.EncodeTools(conv, ts, false)
		if err != nil {
			return local.Example{}, false, err
		}
		return local.Example{Tokens: toks, Mask: mask}, len(toks) <= cfg.Context, nil
	})
}

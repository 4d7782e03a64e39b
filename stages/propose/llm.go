package propose

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/schemas"
	"github.com/whalerun/whale/stages"
)

// Limits of the llm backend's prompt: it must fit a proposer's context
// with room for M full harnesses in the reply.
const (
	llmFrontier    = 3    // frontier harnesses shown besides the parent
	llmFailures    = 4    // failed episodes shown
	llmTraceBytes  = 3000 // per failed episode
	llmSourceBytes = 24000
)

// rules states what a candidate may change; the llm prompt and the
// agent's SKILL.md both carry it.
func rules(cfg Config, domain string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `- Each candidate is a complete harness for the %s domain: one self-contained Starlark file
  (a Python dialect: no imports, no classes, no try/except, no recursion, no while True without a bound;
  re, json and math are predeclared; see the hook contract).
- Each candidate changes exactly ONE mechanism of its parent, so that its score says whether that
  mechanism helps. Name the mechanism as its axis, one of: %s.
- A harness may change prompts, tool input/output formatting, error feedback, retry and turn budgets,
  retrieval parameters, query rewriting, board presentation and move parsing.
- A harness may NOT change the model, the data, the verifier, the environment's transitions or the
  reference answers, and must not contain logic specific to particular tasks of the data set
  (no hard-coded questions, answers, puzzle ids or positions). In chess it may not search for moves itself.
- Every candidate must differ from the parent and from every harness already tried.
- Candidates are checked before they are scored: they must compile, keep the hook contract, and survive
  a dry run of two tasks; a candidate that fails any check is discarded.
`, domain, strings.Join(Axes, ", "))
	if cfg.PromptOnly {
		b.WriteString(`- PROMPT-ONLY SEARCH: a candidate may change nothing but the values of SYSTEM_PROMPT and USER_PROMPT.
  Everything else must stay exactly as in the parent (comments and blank lines may differ). Axis: prompt.
`)
	}
	return b.String()
}

// llmMessages builds the llm backend's request: the contract, the parent
// and the frontier with their scores, and sampled failures.
func llmMessages(in *input) []schemas.Message {
	a := in.arch
	var b strings.Builder
	fmt.Fprintf(&b, "# Task\n\nPropose %d new harness candidates for the %s domain, each a modification of the parent harness below.\n\n", in.cfg.M, in.contract.Name)
	b.WriteString("# Rules\n\n")
	b.WriteString(rules(in.cfg, in.contract.Name))
	b.WriteString("\n# Hook contract\n\n")
	b.WriteString(in.contract.Doc())

	parentID := in.parent.ID()
	fmt.Fprintf(&b, "\n\n# Parent harness %s\n\n%s\n```python\n%s\n```\n", describe(a, parentID), scoreLine(a, parentID), clip(string(in.parent.Source()), llmSourceBytes))

	shown := 0
	for _, id := range a.ranked() {
		if shown == llmFrontier {
			break
		}
		s := a.scores[id]
		c, ok := a.sources[id]
		if id == parentID || !s.OnFrontier || !ok || c.Source == "" {
			continue
		}
		if shown == 0 {
			b.WriteString("\n# Other harnesses on the Pareto frontier (success rate ↑, mean turns ↓)\n")
		}
		shown++
		fmt.Fprintf(&b, "\n## %s\n\n%s\n", describe(a, id), scoreLine(a, id))
		if c.Hypothesis != "" {
			fmt.Fprintf(&b, "Axis %s. Hypothesis: %s\n", c.Axis, c.Hypothesis)
		}
		fmt.Fprintf(&b, "```python\n%s\n```\n", clip(c.Source, llmSourceBytes))
	}

	if tried := a.scored(); len(tried) > 0 {
		b.WriteString("\n# Every harness scored so far\n\n| harness | axis | success | mean turns | hypothesis |\n|---|---|---|---|---|\n")
		for _, id := range a.ranked() {
			c := a.sources[id]
			s := a.scores[id]
			fmt.Fprintf(&b, "| %s | %s | %.3f | %.2f | %s |\n", describe(a, id), c.Axis, s.Success(), s.Turns(), oneLine(c.Hypothesis, 160))
		}
	}

	fails := failures(a, parentID, llmFailures)
	if len(fails) > 0 {
		b.WriteString("\n# Sampled failed episodes\n")
		for i, r := range fails {
			fmt.Fprintf(&b, "\n## Failure %d (harness %s)\n\n```\n%s\n```\n", i+1, describe(a, r.HarnessID), renderEpisode(r, llmTraceBytes))
		}
	}

	fmt.Fprintf(&b, `
# Reply format

Write exactly %d candidates. For each, three header lines and then the complete harness source in one
fenced python block, like this:

name: short-kebab-case-name
axis: one of %s
hypothesis: one sentence: what changes and why it should raise the success rate or cut turns
`+"```python\n# the complete harness, not a diff\n```\n", in.cfg.M, strings.Join(Axes, ", "))

	system := "You are an expert at agent harness engineering. You read harness code, scores and execution " +
		"traces, diagnose why episodes fail, and write improved harnesses as complete Starlark files. " +
		"Follow the reply format exactly."
	return []schemas.Message{{Role: "system", Content: system}, {Role: "user", Content: b.String()}}
}

func describe(a *archive, id string) string {
	name := "unnamed"
	if c, ok := a.sources[id]; ok && c.Name != "" {
		name = c.Name
	}
	return fmt.Sprintf("%s (%s)", name, shortID(id))
}

func shortID(id string) string {
	hex := strings.TrimPrefix(id, "sha256:")
	return "sha256:" + hex[:min(12, len(hex))]
}

func scoreLine(a *archive, id string) string {
	s := a.scores[id]
	if s == nil {
		return "Not scored yet."
	}
	return fmt.Sprintf("Success rate %.3f, mean turns %.2f over %d tasks.", s.Success(), s.Turns(), s.tasks)
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > n {
		s = clip(s, n)
		s = strings.Join(strings.Fields(s), " ")
	}
	return s
}

// failures samples failed episodes: the parent's first, then the other
// harnesses' in ranking order.
func failures(a *archive, parentID string, n int) []schemas.Rollout {
	var out []schemas.Rollout
	take := func(id string) {
		if s := a.samples[id]; s != nil {
			for _, r := range s.failed {
				if len(out) < n {
					out = append(out, r)
				}
			}
		}
	}
	take(parentID)
	for _, id := range a.ranked() {
		if id != parentID {
			take(id)
		}
	}
	return out
}

// checkLLM checks the llm backend's settings.
func (c Config) checkLLM() []error {
	var errs []error
	if c.LLM.Model == "" {
		errs = append(errs, errors.New("llm.model is empty: name the proposer model"))
	}
	if c.LLM.MaxTokens < 0 {
		errs = append(errs, fmt.Errorf("llm.max_tokens %d: want ≥ 0", c.LLM.MaxTokens))
	}
	return errs
}

// llmLabel names the llm backend's proposer after its model.
func llmLabel(c Config) string { return "llm:" + c.LLM.Model }

// llm is the llm backend: one chat call, parsed into up to M proposals.
func (s *Stage) llm(ctx context.Context, _ *stages.Exec, in *input) (outcome, error) {
	if s.LLM == nil {
		return outcome{}, errors.New("propose: the llm backend needs a model client (Stage.LLM)")
	}
	req := models.Request{Messages: llmMessages(in)}
	req.Sampling.Temperature = in.cfg.LLM.Temperature
	if in.cfg.LLM.MaxTokens > 0 {
		req.Sampling.MaxTokens = models.Ptr(int64(in.cfg.LLM.MaxTokens))
	}
	seed := in.seed + int64(in.cfg.Iteration)
	req.Seed = &seed
	resp, err := s.LLM.Chat(ctx, req)
	if err != nil {
		// A model that cannot be reached is worth a rerun, not an empty
		// iteration: the stage fails and commits nothing.
		return outcome{}, fmt.Errorf("propose: llm %s: %w", in.cfg.LLM.Model, err)
	}
	props, extra := parseReply(resp.Content, in.cfg.M)
	out := outcome{proposals: props, summary: map[string]any{
		"llm_prompt_tokens": resp.PromptTokens, "llm_completion_tokens": resp.CompletionTokens,
		"llm_finish_reason": resp.FinishReason,
	}}
	for slot := len(props); slot < in.cfg.M; slot++ {
		reason := "no code in reply"
		if len(props) > 0 {
			reason = fmt.Sprintf("no code in reply for this slot: the reply had %d code blocks for %d candidates", len(props), in.cfg.M)
		}
		if resp.FinishReason == "length" {
			reason += " (the reply hit the token limit)"
		}
		out.rejected = append(out.rejected, Rejection{Name: fmt.Sprintf("candidate-%d", slot+1), Kind: RejectNoCode, Reason: reason})
	}
	for _, p := range extra {
		out.rejected = append(out.rejected, Rejection{Name: p.Name, Axis: p.Axis, Kind: RejectOverLimit,
			Reason: fmt.Sprintf("more than m = %d candidates in the reply", in.cfg.M), Source: string(p.Source)})
	}
	return out, nil
}

var (
	fenceRE  = regexp.MustCompile("^\\s*(`{3,}|~{3,})\\s*([A-Za-z0-9_+-]*)\\s*$")
	headerRE = regexp.MustCompile(`(?i)^[\s>*_#\-\d.)]*(name|axis|hypothesis)[*_\s]*[:：][*_\s]*(.*?)[*_\s]*$`)
)

// codeLangs are the fence languages taken as harness code; a fence with no
// language counts too.
var codeLangs = map[string]bool{"": true, "python": true, "py": true, "starlark": true, "star": true, "bzl": true, "python3": true}

// parseReply reads proposals from a model's reply: each fenced code block
// is one harness, with the name:, axis: and hypothesis: lines written
// since the previous block as its header. Headers are optional (a
// missing name becomes the slot's). An unclosed last block runs to the
// end (a reply cut by the token limit; validation will say what is
// wrong with it). Blocks beyond m are returned as extra.
func parseReply(text string, m int) (props, extra []proposal) {
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	var header proposal
	var all []proposal
	for i := 0; i < len(lines); i++ {
		f := fenceRE.FindStringSubmatch(lines[i])
		if f == nil {
			if h := headerRE.FindStringSubmatch(lines[i]); h != nil {
				val := strings.Trim(strings.TrimSpace(h[2]), "`\"")
				switch strings.ToLower(h[1]) {
				case "name":
					header.Name = val
				case "axis":
					header.Axis = val
				case "hypothesis":
					header.Hypothesis = val
				}
			}
			continue
		}
		fence, lang := f[1], strings.ToLower(f[2])
		j := i + 1
		for j < len(lines) && !isClosingFence(lines[j], fence) {
			j++
		}
		body := strings.Join(lines[i+1:min(j, len(lines))], "\n")
		i = j
		if !codeLangs[lang] {
			continue
		}
		header.Source = []byte(strings.TrimSpace(body) + "\n")
		if strings.TrimSpace(body) == "" {
			header = proposal{}
			continue
		}
		all = append(all, header)
		header = proposal{}
	}
	if len(all) > m {
		return all[:m], all[m:]
	}
	return all, nil
}

func isClosingFence(line, open string) bool {
	t := strings.TrimSpace(line)
	return len(t) >= len(open) && t[0] == open[0] && strings.Trim(t, open[:1]) == ""
}

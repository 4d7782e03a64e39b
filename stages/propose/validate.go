package propose

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/whalerun/whale/episode"
	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/schemas"
	"go.starlark.net/syntax"
)

// DryRunReplies are what the dry run's scripted model says, in turn, for
// every call: a search request and then an answer in the notations the
// domains read (an <answer> tag, a \boxed{} and a move). The dry run
// exercises a candidate's hooks — format_observation, build_messages,
// parse_action, format_tool_result, on_error, should_stop — on real
// environments, not the model: it makes no model calls and costs nothing
// but CPU.
var DryRunReplies = []string{
	"Let me look this up first.\n<search>background facts for the question</search>",
	"I have checked my work. My move is e2e4, and the final answer is \\boxed{42}.\n<answer>42</answer>",
}

// validator checks proposals one by one against the parent, the archive
// and the batch so far.
type validator struct {
	stage *Stage
	in    *input
	tasks []schemas.Task

	parentTree *syntax.File      // the parent, parsed
	byID       map[string]string // harness id → who it is, for duplicate messages
	byTree     map[string]string // canonical digest → who it is
	names      map[string]bool   // candidate names taken in this batch
	envErrors  int               // dry-run episodes that ended in an environment error
	parentVals map[string]any    // the parent's prompt values
	timeout    time.Duration
}

func newValidator(s *Stage, in *input, tasks []schemas.Task) *validator {
	v := &validator{stage: s, in: in, tasks: tasks,
		byID: map[string]string{}, byTree: map[string]string{}, names: map[string]bool{},
		timeout: s.DryRunTimeout,
	}
	if v.timeout <= 0 {
		v.timeout = time.Minute
	}
	who := func(name, id string) string { return fmt.Sprintf("%s (%s)", name, id) }
	parentID := in.parent.ID()
	v.byID[parentID] = who("the parent", parentID)
	if f, err := parse(in.parent.Filename(), in.parent.Source()); err == nil {
		v.parentTree = f
		v.byTree[canonicalDigest(f)] = who("the parent", parentID)
	}
	for _, id := range in.arch.order {
		if _, ok := v.byID[id]; ok {
			continue
		}
		c, ok := in.arch.sources[id]
		name := "an archived harness"
		if ok {
			name = "archived candidate " + c.Name
		}
		v.byID[id] = who(name, id)
		if ok && c.Source != "" {
			if f, err := parse("archived.star", []byte(c.Source)); err == nil {
				if _, taken := v.byTree[canonicalDigest(f)]; !taken {
					v.byTree[canonicalDigest(f)] = who(name, id)
				}
			}
		}
	}
	v.parentVals = map[string]any{}
	for name := range promptNames {
		if _, ok := in.contract.Const(name); ok {
			v.parentVals[name] = in.parent.Constants()[name]
		}
	}
	return v
}

// validate returns the proposal as a candidate row, or why it is rejected.
func (v *validator) validate(ctx context.Context, p proposal) (schemas.Candidate, *Rejection) {
	id := harness.SourceID(p.Source)
	reject := func(kind, reason string) (schemas.Candidate, *Rejection) {
		return schemas.Candidate{}, &Rejection{Name: p.Name, HarnessID: id, Axis: p.Axis, Kind: kind, Reason: reason, Source: string(p.Source)}
	}
	filename := p.Name + ".star"

	// 1. It compiles and keeps the contract.
	h, err := harness.Load(filename, p.Source, harness.Options{Contract: v.in.contract})
	if err != nil {
		return reject(RejectInvalid, err.Error())
	}
	tree, err := parse(filename, p.Source)
	if err != nil { // Load parsed it with the same dialect
		return reject(RejectInvalid, err.Error())
	}

	// 2. It is new.
	if who, ok := v.byID[id]; ok {
		return reject(RejectDuplicate, "duplicate of "+who)
	}
	digest := canonicalDigest(tree)
	if who, ok := v.byTree[digest]; ok {
		return reject(RejectDuplicate, "same code as "+who+" up to comments and layout")
	}

	// 3. Under prompt_only, it changes nothing but the prompts' values.
	if v.in.cfg.PromptOnly {
		if diff := promptOnlyDiff(v.parentTree, tree); diff != "" {
			return reject(RejectPromptOnly, "prompt_only: "+diff)
		}
		same := true
		for name, pv := range v.parentVals {
			if fmt.Sprint(h.Constants()[name]) != fmt.Sprint(pv) {
				same = false
			}
		}
		if same {
			return reject(RejectDuplicate, "prompt_only: SYSTEM_PROMPT and USER_PROMPT have the parent's values")
		}
	}

	// 4. Its hooks survive two episodes against the scripted model.
	if reason := v.dryRun(ctx, h); reason != "" {
		return reject(RejectDryRun, reason)
	}

	label := fmt.Sprintf("candidate %s of this batch", p.Name)
	v.byID[id] = fmt.Sprintf("%s (%s)", label, id)
	v.byTree[digest] = fmt.Sprintf("%s (%s)", label, id)
	return schemas.Candidate{
		HarnessID:  id,
		ParentID:   v.in.parent.ID(),
		Name:       p.Name,
		Hypothesis: strings.TrimSpace(p.Hypothesis),
		Axis:       p.Axis,
		Source:     string(p.Source),
	}, nil
}

// dryRun plays the dry-run tasks with h and the scripted model. It returns
// why h failed, or "" when every episode ended without a hook failing. An
// episode that failed in the environment (a retriever that is down) says
// nothing about the harness: it is counted, logged and let through.
func (v *validator) dryRun(ctx context.Context, h *harness.Harness) (reason string) {
	for _, task := range v.tasks {
		dom := &watchedDomain{Domain: v.stage.Domain}
		chat := &scripted{}
		ectx, cancel := context.WithTimeout(ctx, v.timeout)
		res, panicked := runEpisode(ectx, dom, h, chat, task)
		timedOut := ectx.Err() != nil && ctx.Err() == nil
		cancel()
		if ctx.Err() != nil {
			return "cancelled"
		}
		switch {
		case panicked != "":
			v.in.log.Error("dry run: the episode loop panicked", "task", task.ID, "harness", h.ID(), "panic", panicked)
			return fmt.Sprintf("dry run on task %s: the episode loop panicked: %s", task.ID, firstLine(panicked))
		case res.FinishReason != episode.FinishError:
			continue
		case timedOut:
			return fmt.Sprintf("dry run on task %s: the episode ran past %s", task.ID, v.timeout)
		case dom.failed() != "":
			v.envErrors++
			v.in.log.Warn("dry run: the environment failed; the harness is not blamed", "task", task.ID, "harness", h.ID(), "error", dom.failed())
			continue
		}
		return fmt.Sprintf("dry run on task %s, turn %d: %s", task.ID, res.Turns, res.Error)
	}
	return ""
}

func runEpisode(ctx context.Context, dom episode.Domain, h *harness.Harness, m episode.Chatter, task schemas.Task) (res episode.Result, panicked string) {
	defer func() {
		if r := recover(); r != nil {
			panicked = fmt.Sprintf("%v\n%s", r, debug.Stack())
		}
	}()
	return episode.Run(ctx, dom, h, m, task, episode.Config{Seed: 1}), ""
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// scripted is the dry run's model: it answers every call with the next of
// DryRunReplies, in a loop.
type scripted struct{ calls atomic.Int64 }

func (s *scripted) Chat(ctx context.Context, req models.Request) (*models.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, &models.Error{Kind: models.KindCanceled, Message: "dry run cancelled", Err: err}
	}
	i := s.calls.Add(1) - 1
	reply := DryRunReplies[int(i)%len(DryRunReplies)]
	prompt := 0
	for _, m := range req.Messages {
		prompt += len(strings.Fields(m.Content))
	}
	return &models.Response{
		Content:          reply,
		FinishReason:     "stop",
		Model:            "dry-run",
		PromptTokens:     int64(prompt),
		CompletionTokens: int64(len(strings.Fields(reply))),
		Endpoint:         "dry-run",
		Attempts:         1,
	}, nil
}

// watchedDomain records whether the environment, rather than a hook,
// failed: the dry run blames the harness only for the latter.
type watchedDomain struct {
	episode.Domain
	mu  sync.Mutex
	err string
}

func (d *watchedDomain) fail(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err == "" {
		d.err = err.Error()
	}
}

func (d *watchedDomain) failed() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

func (d *watchedDomain) NewEnv(ctx context.Context, task schemas.Task, h *harness.Harness) (episode.Env, error) {
	env, err := d.Domain.NewEnv(ctx, task, h)
	if err != nil {
		// A bad task, or constants the environment refuses: the contract
		// checked their types and ranges, so this is the environment's.
		d.fail(err)
		return nil, err
	}
	return &watchedEnv{Env: env, d: d}, nil
}

type watchedEnv struct {
	episode.Env
	d *watchedDomain
}

func (e *watchedEnv) Reset(ctx context.Context) (map[string]any, error) {
	obs, err := e.Env.Reset(ctx)
	if err != nil && !isHookError(err) {
		e.d.fail(err)
	}
	return obs, err
}

func (e *watchedEnv) Step(ctx context.Context, a harness.Action) (episode.Step, error) {
	st, err := e.Env.Step(ctx, a)
	if err != nil && !isHookError(err) {
		e.d.fail(err)
	}
	return st, err
}

// isHookError: an environment may call back into the harness (e.g. to
// read a constant through a hook); such failures are the harness's.
func isHookError(err error) bool {
	var he *harness.HookError
	return errors.As(err, &he)
}

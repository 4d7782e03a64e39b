package episode

import (
	"context"
	"time"

	"github.com/whalerun/whale/harness"
	"github.com/whalerun/whale/models"
	"github.com/whalerun/whale/schemas"
)

// Domain is one task family: its hook contract, its baseline harness and
// a factory of environments. Each domains/* package provides one.
type Domain interface {
	// Name is the domain's name in experiment files: searchqa, math, chess, demo.
	Name() string
	// Contract is what a harness of this domain may define.
	Contract() *harness.Contract
	// Baseline is the source of the domain's baseline harness h0.
	Baseline() []byte
	// NewEnv makes the environment of one episode of task, configured by the
	// harness's domain constants (TOPK, CODE_TOOL, BOARD_FORMAT, ...). A bad
	// task (e.g. a chess puzzle whose FEN does not parse) is an error naming
	// the task id.
	NewEnv(ctx context.Context, task schemas.Task, h *harness.Harness) (Env, error)
}

// MetaFilter is implemented by a domain whose task meta holds what a
// harness must not see, such as a chess puzzle's solution line. HookMeta
// gets the decoded meta (it must not change it) and returns what hooks
// see in state["task"]["meta"]. Keys that name reference answers (see
// ReferenceKeys) are removed for every domain.
type MetaFilter interface {
	HookMeta(meta map[string]any) map[string]any
}

// ReferenceKeys are meta keys that hold reference answers in the layouts
// whale imports (JSONL, verl/Search-R1 Parquet); the loop never shows them
// to hooks.
var ReferenceKeys = []string{"answer", "answers", "golden_answers", "ground_truth", "reward_model", "solution", "target"}

// Env is the environment of one episode. The loop calls Reset once, then
// Step with each action the harness parsed, until a Step says Done.
// Tools that reach the outside (retrieval, code) run inside Step: the
// harness never calls them.
type Env interface {
	// Reset returns the first observation, the dict handed to
	// format_observation (e.g. {"question": ...}, or for chess the FEN,
	// board and legal moves as the harness's constants ask).
	Reset(ctx context.Context) (map[string]any, error)
	// Step applies one action of kind answer, move or tool (the loop
	// handles invalid ones). A non-nil error is a failure of the
	// environment itself (not of the model), and ends the episode with
	// that error.
	// A native tool call (the harness's TOOLS, from the tools the domain's
	// contract offers) comes as an action of kind tool with the call's
	// name, id and arguments checked against the tool's parameters (Args,
	// and Input set from the single string argument when there is one).
	Step(ctx context.Context, a harness.Action) (Step, error)
	// Final scores an episode that ended without a terminating action
	// (turns or retries exhausted, should_stop, a model failure): the
	// reward is usually 0, but a domain may grade partial progress.
	Final(ctx context.Context) Outcome
}

// Step is what one action did.
type Step struct {
	// Done ends the episode with Outcome.
	Done    bool
	Outcome Outcome
	// Observation, when set, is the next user message's observation (e.g.
	// the opponent's reply and the new position), given to
	// format_observation.
	Observation map[string]any
	// ToolResult, when set, is the result of a tool call, given to
	// format_tool_result and sent as a tool message (native calls) or a
	// user message (tag-based tools).
	ToolResult any
	// Illegal, when set, says why the environment rejected the action (an
	// illegal move, an unknown tool, a tool that is switched off). It costs
	// one of ILLEGAL_RETRIES; on_error("illegal", Illegal, state) is the
	// feedback. With no retries left the episode ends as failed.
	Illegal string
	// ToolError, when set, says why a tool call failed (the sandbox timed
	// out, the retriever is down); on_error("tool", ToolError, state) is the
	// feedback and the episode goes on.
	ToolError string
}

// Outcome is how an episode ended as the verifier sees it.
type Outcome struct {
	Reward  float64
	Correct bool
	// Answer is the final answer or the moves played, as graded.
	Answer string
}

// Finish reasons of a Result.
const (
	FinishAnswer   = "answer"    // the environment said Done (an answer, a solved or failed puzzle)
	FinishMaxTurns = "max_turns" // MAX_TURNS model calls without Done
	FinishFormat   = "format"    // parse_action rejected more replies than FORMAT_RETRIES allows
	FinishIllegal  = "illegal"   // the environment rejected more actions than ILLEGAL_RETRIES allows
	FinishStopped  = "stopped"   // should_stop returned True
	FinishError    = "error"     // a model call, a hook or the environment failed: Result.Error says which
)

// Result is one finished episode, ready to become a schemas.Rollout row.
type Result struct {
	Outcome
	FinishReason string
	// Error is empty unless FinishReason is FinishError; it names the
	// failing part (model, hook, environment) and never a credential.
	Error string
	// Turns counts model calls.
	Turns            int
	PromptTokens     int64
	CompletionTokens int64
	Latency          time.Duration
	// ModelID is the model id the server reported on the last call (the
	// checkpoint that actually answered); empty if no call succeeded.
	ModelID string
	// Messages is the transcript as the loop keeps it: the system message of
	// the first call, then every observation, assistant reply (as the
	// server sent it, a stop sequence it left out put back, cut at the end
	// of its parsed action), tool result and feedback message in order.
	Messages []schemas.Message
	// Tools is the OpenAI tools array offered on every call, as JSON; ""
	// when the harness offers none.
	Tools string
	// Trace holds every hook call, model call, tool call, environment step
	// and error, in order (see the package doc for the kinds).
	Trace []schemas.TraceEvent
}

// Config is how the loop runs an episode.
type Config struct {
	// Sampling is the decoding of every call; MaxTokens defaults to the
	// harness's MAX_TOKENS when unset.
	Sampling models.Sampling
	// Seed is the episode's seed, sent with every model call (plus the turn
	// number, so that retries of a turn differ).
	Seed int64
}

// Chatter is the part of *models.Client the loop uses; tests may fake it.
// The request's slices and pointers belong to the loop and hold still only
// during the call: an implementation that keeps a request copies them.
type Chatter interface {
	Chat(ctx context.Context, req models.Request) (*models.Response, error)
}

// Package episode is whale's episode loop: it plays one task with one
// harness and one model, and runs batches of episodes with bounded
// concurrency (DESIGN §4 rollout, §6, §7).
//
// Contract:
//   - Run never fails: a bad task, the environment, a hook or the model
//     failing ends the episode with FinishReason FinishError and a one-line
//     Error that names the part ("environment: …", "hook NAME: FILE:LINE:COL:
//     msg", "model: …" with the models.Error kind, endpoint and attempts,
//     "task: …", or "canceled: …" when ctx ended). Every episode is exactly
//     one Result, and one rollouts row through Result.Row.
//   - The loop: Reset, format_observation → first user message; then per
//     turn MAX_TURNS check, should_stop, build_messages, one Chat (the
//     harness's TOOLS and TOOL_CHOICE, stop sequences Config's then STOP's,
//     MaxTokens defaulting to MAX_TOKENS, seed Config.Seed plus the number of
//     calls made before), the reply appended with its reasoning (and a stop
//     sequence the server reported as stop_reason put back at its end).
//     Native tool calls become tool actions answered by one tool message each
//     (with tool_call_id); a call of a tool not offered, or whose arguments
//     are not a JSON object or do not match the tool's parameters, is
//     answered with on_error("tool", ...) without reaching the environment.
//     Otherwise parse_action decides, and an action's end cuts the stored
//     reply there. Invalid replies spend FORMAT_RETRIES (on_error kind
//     "format", or "length" when the reply was cut), rejected actions
//     ILLEGAL_RETRIES (kind "illegal"), failed tools are fed back with kind
//     "tool"; a tool result longer than MAX_TOOL_RESULT_CHARS is cut. Only a
//     Step that says Done ends with FinishAnswer and its Outcome; every other
//     end asks Env.Final.
//   - Hooks see the state dict of harness.Base's StateDoc: task {id,
//     question, meta} (meta decoded from JSON; never the answers), turn
//     (calls made so far), messages (the transcript, no system message),
//     last_action, retries {format, illegal}, as harness.State spells it;
//     every hook gets its own copy.
//   - RunBatch keeps at most concurrency episodes in flight and emits
//     results in job order from one goroutine; at most 4×concurrency
//     episodes are started and not yet emitted, so a slow episode stalls new
//     work rather than growing memory. It stops at the first emit error or
//     when ctx ends; then it emits nothing more and returns that error
//     (ctx.Err()) after every started play has returned.
//
// Result.Messages is the system message of the first call followed by the
// transcript. Result.Trace lists events in order; Turn is the model call an
// event leads to or follows (1-based, 0 before the first call). Kinds:
//   - "hook": every hook call, default or harness (harness.CallRecord).
//   - "model": every successful call; Action "chat: finish=… prompt=…
//     completion=… attempts=… latency=… endpoint=…", Feedback the reply.
//   - "tool": every tool action given to the environment, and every native
//     call the loop refused; Action name("input") [id=…], Feedback its
//     result, tool error or illegal reason.
//   - "cut": a reply cut at the end of its action (Action "kept N of M
//     bytes", Feedback the dropped text, whole) or a tool result cut to
//     MAX_TOOL_RESULT_CHARS.
//   - "env": "reset" (Feedback the observation), answers and moves (the
//     illegal reason, the observation, or "done: reward=… correct=…
//     answer=…"), and "final" (the Outcome of Env.Final when the episode
//     ended without Done).
//   - "context": a call whose messages differ from the default context
//     (SYSTEM_PROMPT, then the transcript); Action is the JSON array of the
//     messages exactly as sent, never clipped, so that the filter stage can
//     rebuild exact SFT contexts.
//   - "error": why the episode failed, with the Starlark backtrace if any.
//
// Every text but a context's is clipped (a few hundred bytes to 2 KB), so a
// trace stays small whatever the model writes.
//
// The package imports harness, models and schemas of whale.
package episode

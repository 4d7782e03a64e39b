// Package modeltest is a FAKE OpenAI-compatible chat completions server for
// tests only: it runs no model. It serves POST /v1/chat/completions (and
// GET /v1/models) from an httptest server on loopback.
//
// Each call's reply comes from a Handler: a script of replies in call order
// (Script), one reply for every call (Always), or any func of the decoded
// request. A Reply either answers (content, reasoning, tool calls, finish
// reason, stop reason, model id, usage) or injects a fault: 429 with
// Retry-After, 500, 503, any status, a dropped connection (before or in
// the middle of the body), a malformed or truncated JSON body, or no
// choices; any reply may be delayed.
//
// Answers take vLLM's chat.completion shape: the choice carries
// "stop_reason" (null unless Reply.StopReason names the stop string or
// token id) and the message "tool_calls" ([] when there are none; content
// null when there are calls and no text), reasoning goes under
// "reasoning_content" (or Reply.ReasoningField). Tool calls may be
// scripted malformed: arguments that are not JSON, a name no tool has, an
// empty ID (the "id" key is then left out), or any JSON at all in
// Reply.RawToolCalls.
//
// SetSlots bounds the calls processed at once, the rest waiting in a
// queue, as vLLM's max_num_seqs does: with a fixed Delay the server then
// has a fixed capacity of slots/delay calls per second.
//
// The server records every request (raw body, the body decoded as a map
// with vendor extras included, the messages and tools decoded, headers),
// counts calls and tracks the most requests in flight at once, so tests can
// assert what a client sent and how hard it pushed. Record(false) stops
// the recording, for benchmarks whose heap must stay flat.
//
// Server.VLLM turns the server into a FAKE vLLM (vllm.go): chat requests
// must name the served model or a loaded LoRA adapter (else vLLM's 404),
// and it answers vLLM's control endpoints whale uses — /collective_rpc
// reload_weights and /reset_prefix_cache (404 unless dev mode), and
// /v1/load_lora_adapter and /v1/unload_lora_adapter (404 unless runtime
// LoRA updating) — with vLLM's failures: 400 "already been loaded", 500
// while loading weights.
package modeltest

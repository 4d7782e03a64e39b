// Package models is whale's inference client: every rollout talks to a model
// through a *Client, over the OpenAI-compatible POST /v1/chat/completions of
// vLLM, SGLang, llama.cpp server, Ollama or whale's own local model.
//
// Contract:
//   - Chat sends one non-streaming chat completion and returns the assistant
//     message, native tool calls (mapped to schemas.ToolCall), the finish
//     reason, the model id the server reports (to check a checkpoint
//     hand-off against), token usage (UsageMissing says when the server sent none)
//     and which endpoint answered after how many attempts.
//   - Several base URLs share the load: each call goes to the endpoint with
//     the fewest calls assigned to it (ties in turn), never more than
//     Config.Concurrency at once per endpoint; an endpoint that keeps
//     failing, or that answered a retryable status with Retry-After, is
//     skipped until its cool-down ends; a retry prefers another endpoint.
//   - Retries (internal/retry: exponential backoff, full jitter) cover 429,
//     5xx but 501 and 505, 408, per-call timeouts, refused or dropped
//     connections and bodies that are malformed, truncated or have no
//     choices. 400/401/403/404, other 4xx, 501, 505, a host that does not
//     resolve and a refused certificate fail at once.
//   - Every failure is an *Error with a Kind, the endpoint (redacted) and the
//     number of attempts, fit to be stored in a rollout row. The API key is
//     read from the environment variable Config.APIKeyEnv names and never
//     appears in an error or a log line.
//   - Cancelling ctx stops Chat at once, whether it is queued for a slot,
//     waiting to retry or waiting for the server.
//   - Vendor extras (min_p, repetition_penalty, chat_template_kwargs, …) are
//     merged into the top level of the request body; top_k has a typed field.
//
// Each attempt is a plain net/http request on one pooled http.Transport:
// the body and the reply are the wire types of package models/openai
// (shared with whale's servers) through encoding/json, a reply is read up
// to MaxReplyBytes, and only Content-Type,
// Accept, Accept-Encoding: identity, User-Agent and Authorization (when
// there is a key) are sent; redirects are followed only within the
// endpoint's origin. The chat completions wire format is small and stable;
// whale depends on no OpenAI SDK.
//
// Tag-based tools need nothing from this package: the harness parses the
// text. The fake server for tests is in package modeltest.
package models

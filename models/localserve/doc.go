// Package localserve serves whale's built-in model (package models/local)
// over the OpenAI-compatible HTTP API that whale's rollouts use with vLLM,
// so the pipeline runs unchanged against either.
//
// Contract:
//   - POST /v1/chat/completions, non-streaming only ("stream": true and
//     "n" > 1 are 400). temperature (default 1), top_p, top_k (-1 or 0: all),
//     max_tokens or max_completion_tokens (default: the rest of the context),
//     seed, stop (a string or a list), tools and tool_choice are honoured;
//     other vendor fields are ignored. The reply's "model" is the served
//     name that answered; usage counts tokens of the byte tokenizer. The
//     choice carries vLLM's "stop_reason" and the message "tool_calls"
//     ([] when there are none).
//   - Tools, as vLLM serves them with --enable-auto-tool-choice and the
//     hermes parser: "tools" is a list of {"type":"function","function":
//     {"name","description","parameters"}} (type may be left out; a
//     function with a name is required, parameters must be an object), and
//     local.EncodeTools renders them as a system turn before the
//     conversation (see package local). tool_choice is "auto" (the default
//     with tools), "none" (tools are still rendered, as vLLM does by
//     default, but the reply is not parsed), "required", or
//     {"type":"function","function":{"name"}} naming one of the tools;
//     anything else is 400 with vLLM's messages, so is a tool_choice other
//     than "none" without "tools", and "required" with an empty list acts
//     as "none". The byte model has no constrained decoding: for
//     "required" the server writes <tool_call> at the start of the
//     assistant turn, for a named tool <tool_call>{"name":"NAME",
//     "arguments": (the template's own form, so the prompt is the tokens
//     the turn renders to), and the reply's text starts with that prefill;
//     a named reply ends after its first </tool_call>.
//   - Tool calls are parsed, when tools are offered and tool_choice is not
//     "none", like vLLM's hermes parser: every <tool_call>…</tool_call>
//     block, and a last one left open, must be a JSON object with a string
//     "name" and an object "arguments", else the whole text is the content
//     and there are no calls. Parsed calls get ids "chatcmpl-tool-" and 32
//     random hex digits, arguments as compact JSON text; content is the
//     text before the first call less one "\n" (the template's separator,
//     so the reply renders back to what the model wrote). With "auto",
//     content is null when empty and finish_reason is "tool_calls"; with
//     "required", content is "" and finish_reason "tool_calls" when the
//     decoding stopped (not at max_tokens); with a named tool, content is
//     "" and finish_reason "stop", as vLLM and OpenAI answer.
//   - Seeds: a request with a seed gets the same text whatever else is
//     batched with it (it draws from the PCG stream (seed, 0), see
//     local.Model.GenerateEach); without one the server picks a seed.
//   - Prompts that fill the context: by default the oldest tokens after
//     <|bos|> are dropped so that the prompt leaves room for
//     min(max_tokens, context/4) new tokens (the tools turn, which comes
//     first, goes first); the latest turns and the generation prompt survive (a byte model's context is a few hundred
//     bytes, less than many system prompts). With Options.NoTruncate such a
//     prompt is a 400, as vLLM answers past max_model_len.
//   - Stop sequences are applied to the decoded text before tool calls are
//     parsed, as vLLM's stop checker does token by token: the one whose
//     first match completes earliest wins (the first listed on a tie), the
//     reply ends before it (finish_reason "stop", stop_reason the stop
//     string; vLLM's include_stop_str_in_output false), and
//     completion_tokens counts the tokens up to and including it. An empty
//     stop string is 400, as in vLLM. An end token gives stop_reason null.
//   - Requests arriving together are decoded in one batched Generate call
//     per served model: a batch closes after Options.Window (2 ms) without
//     a new request, after 5 Windows in all, or at Options.MaxBatch (64);
//     while a batch decodes the next one queues. A batch decodes until its
//     longest request is done.
//   - Prefix caching, as vLLM's automatic prefix caching: the keys and
//     values of recently decoded sequences (Options.PrefixCacheBytes,
//     128 MiB; least recently used first out) let a prompt that starts
//     like one of them, such as an episode's next turn, be fed only from
//     where the two part. Replies are the same tokens with or without it
//     (local.PrefixCache); usage still counts every prompt token. It cut
//     the CPU time of whale demo --quick by a third (160 s to 105 s);
//     BenchmarkServeEpisodes measures two-turn conversations with it on
//     and off.
//   - GET /v1/models lists the base and every loaded checkpoint (id,
//     parent, root = the path it came from, and the weights' "digest").
//   - POST /v1/load_lora_adapter {"lora_name","lora_path"} loads a
//     models/local checkpoint (a file, or a directory holding
//     CheckpointFile) and serves it under lora_name next to the base, as a
//     LoRA-serving vLLM does with an adapter: 200 on success, 400 "... has
//     already been loaded" for a name in use. POST /v1/unload_lora_adapter
//     {"lora_name"} drops it (404 when unknown). Requests already queued
//     keep the weights they named. Both exist only with
//     Options.AdapterDir: without it they are 404, as vLLM's are without
//     VLLM_ALLOW_RUNTIME_LORA_UPDATING. lora_path must lie under that
//     directory (no "..", no symbolic link out of it or absolute), name a
//     regular file of at most Options.MaxAdapterBytes (checked on what
//     was opened, before reading) or a directory holding CheckpointFile
//     (nothing is searched); a refusal names the path and the reason,
//     never the file's bytes. Loads run one at a time.
//   - Guards (package internal/httpguard), in this order: with
//     Options.Token every request but GET /health needs it as a bearer
//     token (401); POST bodies must be application/json (415, vLLM's
//     message); bodies over 8 MiB are 413; beyond Options.MaxInFlight
//     requests in flight (default 4 × MaxBatch, queued chat requests
//     included) the answer is 429 with Retry-After; a request not
//     answered within Options.RequestTimeout (10 min) is 503 with
//     Retry-After. Listen's server reads a request within
//     Options.ReadTimeout (30 s; a slow body is 408), writes the reply
//     within ReadTimeout + RequestTimeout + 30 s and closes idle
//     connections after 2 minutes.
//   - Errors are OpenAI-style JSON: {"error":{"message","type","code"}}.
package localserve

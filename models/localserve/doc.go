// Package localserve serves whale's built-in model (package models/local)
// over the OpenAI-compatible HTTP API that whale's rollouts use with vLLM,
// so the pipeline runs unchanged against either.
//
// Contract:
//   - POST /v1/chat/completions, non-streaming only ("stream": true and
//     "n" > 1 are 400). temperature (default 1), top_p, top_k (-1 or 0: all),
//     max_tokens or max_completion_tokens (default: the rest of the context),
//     seed and stop (a string or a list) are honoured; tools and other vendor
//     fields are ignored (the byte model writes tool calls as text). The
//     reply's "model" is the served name that answered; usage counts tokens
//     of the byte tokenizer.
//   - Seeds: a request with a seed gets the same text whatever else is
//     batched with it (it draws from the PCG stream (seed, 0), see
//     local.Model.GenerateEach); without one the server picks a seed.
//   - Prompts that fill the context: by default the oldest tokens after
//     <|bos|> are dropped so that the prompt leaves room for
//     min(max_tokens, context/4) new tokens; the latest turns and the
//     generation prompt survive (a byte model's context is a few hundred
//     bytes, less than many system prompts). With Options.NoTruncate such a
//     prompt is a 400, as vLLM answers past max_model_len.
//   - Stop sequences are applied to the decoded text: the reply ends before
//     the first one (finish_reason "stop"), and completion_tokens counts the
//     tokens up to and including it.
//   - Requests arriving together are decoded in one batched Generate call
//     per served model: a batch closes after Options.Window (2 ms) without
//     a new request, after 5 Windows in all, or at Options.MaxBatch (64);
//     while a batch decodes the next one queues. A batch decodes until its
//     longest request is done.
//   - GET /v1/models lists the base and every loaded checkpoint (id,
//     parent, root = the path it came from, and the weights' "digest").
//   - POST /v1/load_lora_adapter {"lora_name","lora_path"} loads a
//     models/local checkpoint (a file, or a directory holding one) and serves
//     it under lora_name next to the base, as a LoRA-serving vLLM does with
//     an adapter: 200 on success, 400 "... has already been loaded" for a
//     name in use. POST /v1/unload_lora_adapter {"lora_name"} drops it (404
//     when unknown). Requests already queued keep the weights they named.
//   - Errors are OpenAI-style JSON: {"error":{"message","type","code"}}.
package localserve

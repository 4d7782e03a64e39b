// Package local is whale's built-in model: a small decoder-only
// transformer over bytes, trained and sampled on the CPU in Go, so the demo
// and the tests run the same rollout and fine-tuning path as a GPU
// deployment, with no GPU and no cgo.
//
// Speed: float32 matrix multiplies use a packed 6×16 AVX2/FMA micro-kernel
// (sgemm_amd64.s, ~65–95 GFLOP/s per core here against ~10–14 for gonum's
// Sgemm) and decode-time attention two small AVX2 kernels; on other CPUs
// and in the float64 path used by the gradient checks, gonum's BLAS and
// plain Go loops do the same work.
//
// Contract:
//   - Tokens: 256 byte tokens then <|bos|> <|eos|> <|system|> <|user|>
//     <|assistant|> <|tool|> <|end|> (TokenizerVocab = 263). Encode renders
//     a conversation as <|bos|> (<|role|> content <|end|>)* [<|assistant|>]
//     and flags the tokens an assistant wrote (content and closing <|end|>);
//     those flags are the loss mask. Native tool calls are written into the
//     text as <tool_call>{"name":…,"arguments":…}</tool_call>, one a line
//     after the content. EncodeTools renders tools offered to the model as
//     a system turn right after <|bos|>: <tools>, one JSON line per tool
//     ({"name","description","parameters"}, schema keys sorted), </tools>;
//     with no tools it is Encode, byte for byte. The markers are plain
//     bytes, so the vocabulary did not change. Decode stops at <|end|> or
//     <|eos|>.
//   - Model: learned token and position embeddings; per block pre-RMSNorm
//     (gain, no bias), causal multi-head attention (fused QKV with bias,
//     output projection with bias), pre-RMSNorm ReLU MLP with biases; final
//     RMSNorm; an output projection with bias, not tied to the embedding.
//     New(cfg, seed) initialises deterministically from seed.
//   - TrainStep(ctx, batch, opts) does forward, hand-written backward,
//     cross-entropy summed over masked tokens and divided by their number
//     in the batch, global gradient-norm clipping and AdamW (decay on
//     matrices and embeddings, not on gains and biases). Examples are split
//     into one contiguous group per GOMAXPROCS with its own gradient buffer;
//     the buffers are summed before the update. The caller passes the
//     learning rate of each step (it owns the schedule).
//   - Generate(ctx, prompts, opts) decodes every prompt with a KV cache,
//     prompts batched per group, with temperature (0 = arg-max), top-k and
//     top-p, until an end token, MaxNewTokens or the context; a prompt
//     longer than the context is an error, never truncated. Prompt i draws
//     from the PCG stream (Seed, i): the same prompts and options give the
//     same tokens whatever GOMAXPROCS or the other prompts are.
//     GenerateChat encodes conversations first.
//   - Generate and Loss only read the weights and may run concurrently;
//     TrainStep writes them and must not overlap either.
//   - Save writes a checkpoint atomically (temporary file, rename); Load
//     verifies it and fails with an error naming the file and wrapping
//     ErrCorrupt for any truncation, trailing bytes or changed byte.
//     Weights round-trip bit-exactly; Digest names them.
//
// Checkpoint format (version 1), all integers little-endian:
//
//	magic    8 bytes  "WHALELM1"
//	hlen     uint32   length of the header
//	header   hlen bytes of JSON: {"format":"whale-local-model",
//	         "config":{vocab,layers,d_model,heads,d_ff,context},
//	         "tokenizer":"bytes-v1","step":N,"dtype":"float32",
//	         "tensors":[{"name","shape"}…],"optimizer":bool,
//	         "payload_bytes":N,"payload_sha256":hex}
//	payload  the tensors as float32 (IEEE 754 bits, little-endian), row-major,
//	         in the order of "tensors": wte [vocab,d], wpe [context,d], then per
//	         block hN.ln1.g, hN.attn.wqkv [d,3d], hN.attn.bqkv, hN.attn.wo [d,d],
//	         hN.attn.bo, hN.ln2.g, hN.mlp.w1 [d,d_ff], hN.mlp.b1, hN.mlp.w2
//	         [d_ff,d], hN.mlp.b2, then lnf.g, out.w [d,vocab], out.b; when
//	         "optimizer" is true, AdamW's first moments and then second
//	         moments follow in the same order (the step count is "step")
//	trailer  32 bytes: SHA-256 of everything before it
//
// Linear weights are stored [in, out] (y = x·W + b). payload_sha256 is the
// content digest of the payload; Digest is the SHA-256 of the weights
// alone, which equals payload_sha256 when there is no optimiser state.
package local

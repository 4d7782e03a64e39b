// Package demo is whale's demo domain: single-digit arithmetic for the
// built-in local model (models/local), built so that both WHALE levers
// matter for it.
//
// Contract:
//   - Tasks(seed, n, split) draws distinct problems "What is A op B?"
//     (A, B in 0..9, op + - *, no negative answers) from a split fixed by a
//     hash of the problem: 151 train, 50 search, 54 test; WriteDatasets
//     writes all three as JSONL for `whale data import`.
//   - The verifier (Grade) compares the answer as an integer; reward 1 or 0.
//     There are no tools; Final is reward 0.
//   - Pretrain(ctx, opts) makes the starting model deterministically (same
//     options and GOMAXPROCS, same weights) from conversations it
//     generates: replies are tagged <answer>N</answer> when a message asks
//     for that format (AnswerCue, or feedback naming it) and mostly prose
//     otherwise, and 25% of replies carry a near-miss number. So h0 (tags
//     only, no cue, no retry) loses answers to the format, which one
//     constant flip (ANSWER_CUE, LENIENT_PARSE, FORMAT_RETRIES) recovers;
//     and sampled answers are often wrong, which RSFT on verified replies
//     sharpens. testdata/pretrained.wlm is DefaultPretrain's result.
package demo

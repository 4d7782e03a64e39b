// Package evaluate is the evaluate stage (DESIGN §4): it scores harness
// candidates with one model on a task set — the search set with one
// sample per pair by default (mode "search"), or a test split with k = 8
// for mean@8 and pass@8 (mode "test") — and keeps the Pareto frontier
// (success ↑, mean turns ↓) and the winner among its candidates.
//
// Contract:
//   - Candidates: the committed "candidates" input (a propose stage's
//     table; each row's source must hash to its harness_id) or, without
//     one, Config.Harnesses ("h0" or archived ids). Their order is the
//     archive order the winner rule breaks last ties with.
//   - Jobs: every (candidate × task × sample). Tasks are the input's file
//     order, then row order, after the split filter, cut to Limit (0: all).
//     Seeds are play.Seed(stage seed, task id, sample): the same for every
//     candidate, so candidates meet the same draws.
//   - Outputs per shard: rollouts.parquet (every episode, streamed; rows
//     carry stage "evaluate", section "harness" in mode search and "test"
//     in mode test unless Spec.Place says another, and the schedule and
//     round of Spec.Place, which is not hashed) and
//     evals.parquet (one schemas.Eval per (harness, model, task), scored by
//     metrics.Accumulator with k = Samples).
//   - Shards split the tasks: task i of the list goes to shard i mod n, so
//     every (harness, task) group lies wholly in one shard and the evals of
//     the shards are final as written. The frontier needs every shard: the
//     shards' summaries carry per-candidate scores weighted by their task
//     counts, and MergeSummaries computes the frontier and the winner at
//     the stage commit. The committed manifest's summary is therefore the
//     frontier's home for any shard count (DecodeSummary reads it);
//     frontier.json, the same content as a file, is written only when the
//     stage runs as one shard.
//   - success is mean@k over tasks (macro average of each task's mean
//     reward over its k samples); failed episodes count with their rows'
//     reward (0 in practice) and are also reported as failed.
//   - With Stage.Archive set, every candidate's source is also stored in
//     the content-addressed harness archive (idempotent), so that a later
//     rollout can run the winner by its id.
package evaluate

// Package rollout is the rollout stage (DESIGN §4): it plays a harness
// with one model on a window of a tasks table, G samples per task, and
// streams one rollouts row per episode into the stage's Parquet files.
//
// Contract:
//   - Identity: Config (domain, harness id, model name, sampling, samples,
//     window, shuffle seed, split), the "tasks" input and the stage seed.
//     The Stage's fields (domain implementation, model client,
//     concurrency, progress, log, archive) are how it runs, not what it
//     computes, and are not hashed.
//   - Tasks: the order of the input is its committed manifest's file order,
//     then row order, after the split filter. The window is Limit tasks
//     from absolute position Offset of a sequence of epochs, each the n
//     tasks once (position p is in epoch p/n), so a planner that advances
//     Offset by Limit per weight step cycles through epochs; Limit 0 or
//     above the count means every task once. A window never holds a task
//     twice. Without Shuffle every epoch is the stored order (the window
//     wraps around the end, Offset taken modulo n). With Shuffle, each
//     epoch is its own order, a pure function of the seed and the epoch
//     (and, for the repair of a window that crosses into it, of Limit and
//     Offset modulo Limit), that all windows Offset+k*Limit share; see
//     play.Window.Indices for the shuffle, the repair and the fallback to
//     one order for windows above about half the tasks.
//   - Jobs: window slot j (0-based) and sample s make job k = j*Samples+s;
//     shard i of n plays the jobs with k mod n == i, in increasing k, so
//     that every shard gets a share of every task's samples.
//   - Seeds: each episode's seed is play.Seed(stage seed, task id, sample),
//     independent of shards and window: see that function for the formula.
//   - Rows: exactly one per job, failed episodes included (their error in
//     the error column); model_id is what the server reported, else
//     Config.ModelName. Memory stays flat in the number of episodes: rows
//     stream to the file as they finish, in job order. Every row carries
//     stage "rollout", section "weight" (unless Spec.Place says another)
//     and the schedule and round of Spec.Place, which is not hashed.
//   - A harness that does not load, a tasks file that is not a tasks
//     table, or a task of another domain fails the shard before any
//     episode runs.
//   - Summary (merged over shards by MergeSummaries): episodes, failed,
//     correct, mean_reward, mean_turns, prompt_tokens, completion_tokens,
//     model_ids, harness_id, tasks (the window), samples.
package rollout

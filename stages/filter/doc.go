// Package filter is the filter stage: rejection sampling over the rollouts of
// one weight step, as WHALE's online RSFT does it. It reads the input named
// "rollouts" (a committed rollout stage) and writes the "sft" table and the
// per-task "acceptance" file.
//
// Contract:
//   - An episode is accepted when its reward is strictly above
//     Config.Threshold (0.5 unless the config says otherwise) and its error is
//     empty. Every accepted episode is kept: no top-k, no one per task.
//   - Rows are streamed file by file and never held in memory; memory grows
//     with the number of tasks, not episodes.
//   - EpisodeID is "<task_id>/<sample>@<position>", the position being the
//     rollout row's (e.g. "nq-17/3@r002-w04"): stable across reruns and unique
//     within a rollout stage, whose (task, sample) pairs are.
//   - Without context management, an accepted episode gives one example,
//     ExampleID = EpisodeID, whose messages are the rollout's transcript and
//     whose train_mask is true exactly on role "assistant" messages (the
//     model's replies as the loop stored them: cut at the end of their
//     action); system, user, tool and feedback messages
//     carry no loss.
//   - With context management — the trace holds events of kind "context",
//     whose action is the JSON list of messages the harness sent for one model
//     call — the transcript is not what the model saw. Then the example of a
//     call is its context plus its reply, with loss on the reply only. The
//     pairing is exact, never guessed: the n-th trace event of kind "model" is
//     the n-th model call and wrote the n-th assistant message of the
//     transcript (so the two counts must agree), and a context event belongs
//     to the model call with the same turn (exactly one must exist). Each call
//     gives one example, ExampleID "<episode_id>#<turn>", in call order: its
//     context event's messages, or for a call without one the default context
//     it was sent (the system message and the transcript up to its reply). A
//     trace that breaks these rules is an error naming the file and row.
//   - An example with no assistant message carries no loss and is dropped
//     (counted as empty_examples).
//   - Shards split the rows by a hash of task_id: every shard reads every
//     input file and keeps its own tasks, so per-task counts never straddle
//     shards and the summaries add up exactly (MergeSummaries).
//   - The summary (see Summary) holds counts and rates; the per-task counts
//     go to acceptance.json, a JSON array of {task_id, episodes, accepted}
//     sorted by task_id, one file per shard with disjoint tasks.
//   - Nothing accepted still commits an empty sft table (one file, 0 rows)
//     with accepted = 0: the planner skips the update and counts the rollouts.
package filter

// Package analysis scores rollout Parquet offline: `whale analyze` reads the
// rollouts of committed stages, or loose files, and reports mean@k, pass@k,
// accuracy, turns, tokens and failures per group of rows.
//
// Contract:
//   - Rows are grouped by any of run, schedule, position, round, section,
//     stage, harness_id, model_id and task_id. Within a group, the scores
//     are those of package metrics, computed per task and macro-averaged
//     over tasks (each task weighs the same whatever its sample count):
//     mean@k, pass@k (the unbiased estimator, k = each task's own n unless
//     Options.K), accuracy (the fraction correct), mean turns and mean
//     prompt and completion tokens. The failure rate is failed episodes
//     (error != "") over all episodes.
//   - Files stream: only the columns the scores and the grouping need are
//     decoded (never messages or trace), one record batch at a time, and
//     memory grows with the number of (group, task) pairs, not with rows.
//   - A file is validated as a rollouts table before it is read; a mismatch
//     wraps schemas.ErrSchemaMismatch (or ErrNewerSchema) and names the file
//     and the column.
//   - Results are sorted by their group values (positions and rounds in
//     the planner's order), so the same inputs print the same output.
//
// The package builds on metrics, schemas, storage and pipeline/schedule (for
// positions); it imports no stage, and only cmd/whale imports it.
package analysis

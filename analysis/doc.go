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
//     decoded (never messages or trace) into Arrow arrays (pqarrow), one
//     record batch at a time. Row groups, of one file or of several, are
//     read in parallel, one worker per GOMAXPROCS; each sums its batches
//     column by column into per-(group, task) sums, and the sums of the
//     row groups are merged in file and row-group order, so the output
//     does not depend on the number of workers. Memory is a few batches
//     per worker plus the (group, task) sums: it grows with the number of
//     pairs, not with rows.
//   - The scores are those metrics.Accumulator computes from the same rows,
//     bit for bit where each (group, task) pair lies in one row group (a
//     test holds the two together); sums merged across row groups may
//     differ from the per-row order by rounding only.
//   - A file is validated as a rollouts table before it is read; a mismatch
//     wraps schemas.ErrSchemaMismatch (or ErrNewerSchema) and names the file
//     and the column.
//   - For each run read with AddRun, whatever the grouping, Result has a
//     Headline: the mean@k of its final test evaluation and its peak (the
//     best over its tests, the first to reach it; the paper reports the
//     best mean@8), each with its position, round, section and stage. The
//     files of test positions are read a second time for it, grouped by
//     run, position and stage; loose files have no headline.
//   - Results are sorted by their group values (positions and rounds in
//     the planner's order), so the same inputs print the same output.
//
// The package builds on metrics, schemas, storage and pipeline/schedule (for
// positions); it imports no stage, and only cmd/whale imports it.
package analysis

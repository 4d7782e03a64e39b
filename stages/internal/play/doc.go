// Package play is what the rollout and evaluate stages share: reading a
// tasks input into a window, loading harnesses by id, deriving episode
// seeds, streaming rollout rows into a stage file, and counting them for
// a summary. It is internal to stages: a stage never imports another
// stage, so their common ground lives here.
//
// Contract:
//   - The order of a tasks input is its committed manifest's file order,
//     then row order within each file, after the optional split filter.
//     ReadTasks returns the window of that order that a Window names, in
//     window order: a Window is Limit slots from absolute position Offset
//     of a sequence of epochs, each the tasks once, and never holds a task
//     twice. Without a shuffle seed every epoch is that order, so windows
//     wrap around the end; with one, each epoch is an order of its own, a
//     pure function of the seed and the epoch that all the windows of a
//     run agree on (Window.Indices).
//   - Seed is a pure function of (stage seed, task id, sample).
//   - RolloutWriter stamps every row with where it ran (schedule, round,
//     section, stage: schemas.Rollout); the stage passes the section it
//     computes, which Exec.Place overrides.
//   - A harness reference is "h0" (the domain's baseline) or a content id
//     "sha256:<hex>" read from the archive; what runs always carries its
//     real id.
package play

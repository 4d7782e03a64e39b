// Package report renders one or several whale runs as a static HTML page
// (`whale report`, and the end of `whale demo`).
//
// Contract:
//   - Collect reads only artifacts: each run's run.json, its committed
//     stage manifests (as pipeline.Units groups them, the planner's own
//     reading) and, to say whether the run is done or what it does next,
//     the planner's decision. A run in progress is reported as far as it
//     got; a run without run.json is an error.
//   - Rollouts on every x axis are the budgeted ones: episodes of weight
//     steps (the rollout stage) and of harness iterations (the evaluate
//     stage), summed in schedule order. A test sits at the rollouts spent
//     before it and costs nothing on that axis; its own episodes are
//     counted apart (Run.TestRollouts).
//   - A harness phase's frontier and winner are computed over the phase's
//     whole archive with metrics.Frontier and metrics.Winner, as the
//     planner chooses the harness it hands on.
//   - A run's final test is its newest; its peak is the test with the best
//     mean@k, the first to reach it (the paper reports the best mean@8),
//     shown with its position, round and kind of test.
//   - Write creates, in one folder: index.html (a summary table per run,
//     the plots with captions on how to read them, a table of every unit
//     of each run), one PNG per plot (accuracy.png, timeline.png,
//     frontier-<run>.png, acceptance.png; a plot with nothing to show is
//     replaced by a sentence saying why) and report.json, the Data the
//     page was made from. The page loads nothing from outside the folder
//     (its Content-Security-Policy forbids it) and escapes every text that
//     comes from the artifacts. Files are replaced by rename.
//   - report.json is Data as encoding/json writes it: runs in the order
//     given, each with its units (position, kind, rollouts before and
//     after, scores), phases, test points and harness candidates.
//   - Compare (whale demo) groups runs that are seeds of one schedule and
//     adds Data.Comparison: per group, the mean, sample standard
//     deviation, minimum and maximum over seeds of the peak and final
//     test mean@k, of the rollouts spent, and of the score in force (the
//     newest test at or before) at the smallest spend any compared run
//     reached, so that a run that stopped short of its budget is also
//     compared at equal spend; the page says so in words and names such
//     runs. With a comparison the page opens with its table, and
//     seeds.png (each seed's curve, the min–max band over seeds and the
//     seed mean, per schedule) takes the place of accuracy.png.
package report

// Package schedule is the decision logic of whale's planner: given a run's
// normalized experiment, the sizes of its splits and the units of work done
// so far, Next says what runs next and why. It is pure: no I/O, no clock,
// no randomness; the same inputs give the same Decision, so `whale plan`
// and two planners on the same artifacts agree. Reading the ledger and the
// manifests into a History is the caller's job.
//
// # Units
//
//   - weight step: rollout (a train batch) → filter → finetune. Cost
//     rsft.batch_size × rsft.group_size rollouts (WeightStepRollouts);
//     signal: the step's mean training reward.
//   - harness iteration: the first of a phase scores the incoming harness
//     (search × samples_per_candidate rollouts); each later one proposes
//     candidates_per_iteration candidates and scores them
//     (M × search × samples_per_candidate; HarnessIterationRollouts). The
//     search size is min(harness.search_set_size, the tasks available).
//     Signal: the best search-set score in the phase archive so far
//     (Unit.BestScore, folded with Unit.Scores).
//   - test: mean@k of a phase's outgoing (model, harness) pair on the test
//     split, test size × eval.k rollouts (TestRollouts).
//
// # Positions
//
// A round is one weight phase and the harness phase after it. Positions
// name stage folders ("<position>-<stage>"):
//
//	r003-w02   weight step 2 of round 3
//	r003-wt    test after the weight phase of round 3
//	r003-h01   harness iteration 1 of round 3 (scores the incoming harness)
//	r003-ht    test after the harness phase of round 3
//	r000-t     test of the initial pair, only when no unit fits the budget
//
// Tests name the phase they follow ("wt"/"ht") because a round has two
// phases and each may be tested. Numbers have at least 3 (round) and 2
// (index) digits and widen beyond; order positions with ComparePositions,
// not as strings. weights-only counts one round per weight phase;
// harness-only and stagewise have a single round.
//
// # Switching (whale and fst; fst plans exactly like whale)
//
// Phases alternate, starting with a weight phase. Lengths in epochs become
// steps as max(1, round(E × ceil(train/batch))) (EpochsToSteps); window,
// burn-in and patience each become at least 1 step that way.
//
//   - fixed (E, I): a weight phase is E epochs of steps; a harness phase is
//     I iterations, the incoming-harness evaluation being the first.
//   - patience, weight phase: the window mean is the mean of the last
//     min(window, steps) step rewards of the phase (partial at its start;
//     burn-in keeps those early means from ending it). The best updates
//     only when a window mean exceeds it by more than 1e-9, so a plateau
//     equal to the best (up to float rounding) does not reset patience.
//     The phase ends when steps > burn-in and steps since best ≥ patience.
//   - patience, harness phase: ends when iterations ≥ harness_min and
//     iterations since the best score improved (strictly, as above) ≥
//     harness_patience, or when iterations reach harness_cap.
//   - every harness phase, in every schedule, ends as soon as a candidate
//     scores 1.0 (Unit.Perfect or a score ≥ 1): nothing can beat it.
//   - every harness phase, in every schedule, ends after 3 iterations in a
//     row that scored nothing (index > 1, no rollouts, no scores: the
//     proposer gave no valid candidate). Such iterations cost no rollouts,
//     so without this a dry proposer would never exhaust budget.rollouts.
//
// No harness phase after the last weight phase: a whale harness phase, and
// each of its iterations, starts only if a weight step can still follow it
// (a weight step left in weight_steps/epochs, and its rollouts kept in
// budget.rollouts). A whale run therefore always ends after a weight phase.
//
// # Other schedules
//
//   - weights-only: weight steps only. Nothing to switch to, so the switch
//     block's patience settings are ignored; the steps are cut into phases
//     of switch.fixed.epochs only to test the baseline at the same points
//     of training as whale (one phase when that is not > 0).
//   - harness-only: one harness phase with the fixed base model, bounded by
//     budget.harness_iterations and/or budget.rollouts (and the 1.0 stop);
//     the switch rule is not applied, since one phase has nothing to switch
//     to and splitting it would reset the phase archive.
//   - stagewise: one weight phase using the whole weight budget, then one
//     harness phase bounded by budget.harness_iterations (and rollouts).
//     While training it keeps in budget.rollouts the cost of that harness
//     stage (all harness_iterations, or its first iteration without them).
//
// # Budgets (zero means no limit; any limit ends the run)
//
//   - weight_steps and epochs: total weight steps; with both, the smaller.
//   - rollouts: target-model rollouts of training and harness search, as
//     recorded in the history (Unit.Rollouts, not the planner's estimate).
//     A unit starts only if spent + its cost ≤ budget.rollouts, so the
//     budget is never exceeded. Test rollouts are reported apart (Signals
//     "test_rollouts_spent") and do not count, as in the paper.
//   - harness_iterations: total harness iterations in all schedules. In
//     whale it cuts the harness phase it runs out in; the next weight phase
//     still runs, and the run ends after it.
//
// # Tests
//
// With eval.test_every_phase a test follows every phase, and the last of
// them is the final one. Otherwise only the final pair is tested, once,
// before done. Without a test split (test size 0, allowed only with
// test_every_phase off) there are no tests.
//
// # History
//
// Next replays the history unit by unit and requires each to be the unit
// the plan would have chosen there (kind, phase, index); otherwise it
// returns a *HistoryError (ErrHistory) naming the index and what the plan
// expected. New returns ErrInputs for inputs no rule can run on, such as a
// phase no budget would end.
package schedule

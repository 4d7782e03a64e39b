// Package metrics is the scoring arithmetic every part of whale shares: the
// evaluate stage, the planner, `whale analyze` and `whale report` all score
// rollouts through it, so that one number means one thing everywhere.
//
// Contract:
//   - A group is the samples of one (harness, model, task). Its mean@k is
//     the mean reward over its samples; its pass@k is the unbiased estimator
//     1 - C(n-c,k)/C(n,k) over its n samples of which c are correct
//     (Rollout.Correct), which is "any correct" when n == k. Failed episodes
//     (error != "") count as samples with the reward and correctness their
//     rows carry.
//   - Accumulator streams rollout rows in any order with memory proportional
//     to the number of groups, not rows. Its Evals and Summaries are sorted;
//     counts, turns and tokens are exact integer sums and rewards a
//     compensated sum, so the order rows arrive in changes a mean by at most
//     rounding.
//   - Per (harness, model), scores are macro averages over tasks: each task
//     weighs the same however many samples it has.
//   - Frontier and Winner implement the harness search's Pareto frontier
//     (success ↑, mean turns ↓) and its acceptance rule (top success, then
//     fewer turns, then earlier in the archive), both deterministic.
//
// The package imports nothing else of whale but schemas.
package metrics

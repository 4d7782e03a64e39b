// Package slurmsubmit turns a run's next stage into Slurm jobs: what
// `whale submit slurm` does.
//
// Contract:
//   - Submit asks the planner for the next stage. A stage with N > 1 shards
//     becomes an array of N tasks (`whale stage --shard I/N`) and a commit
//     job after it (afterok: `whale stage --finalize`); any other stage is
//     one job running `whale step`. The last job of a submission then runs
//     `whale submit slurm` again, so a run drives itself through Slurm until
//     its schedule ends; a job that fails stops the chain, because its
//     script stops at the first failing command and its dependents are
//     afterok.
//   - Chain K > 1 submits K stages ahead: the planned stage, then K-1
//     `whale step` jobs, each afterok on the one before. The planner cannot
//     know a later stage's position (nor whether it is sharded) before the
//     earlier ones commit, so those jobs do not name a stage: each plans
//     when it starts, and a sharded rollout among them runs its shards one
//     after another in that job.
//   - A run is driven by one chain at a time: Submit submits nothing while a
//     job recorded in the run's ledger is still queued or running (other
//     than the calling job itself), or while another process holds the
//     run's lease (a cron `whale step` or `whale run` is driving it).
//   - Job ids go into the ledger (ledger.KindJobs). Scripts carry the root
//     URL, the run name and the whale binary's path, never a credential:
//     the jobs get those from the environment sbatch passes on
//     (--export=ALL is Slurm's default), and a root URL that carries one is
//     refused.
package slurmsubmit

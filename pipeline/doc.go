// Package pipeline drives a run: it reads what the run has committed,
// asks the schedule what comes next, and executes exactly that stage under
// the run's lease, recording the decision in the ledger (DESIGN §5).
//
// Contract:
//   - The planner is a pure function of the artifacts: the frozen spec
//     (run.json), the committed stage manifests and the input datasets'
//     manifests. Two planners on the same artifacts agree; the ledger is a
//     record for people, never an input.
//   - A unit of the schedule is done when its last stage has committed: a
//     weight step (rollout → filter → finetune) at rNNN-wNN, a harness
//     iteration (evaluate the incoming harness, or propose → evaluate) at
//     rNNN-hNN, a test evaluation at rNNN-wt, rNNN-ht or r000-t. Inside a
//     unit, the next stage is the first one not committed, so a crash
//     anywhere resumes at the stage it interrupted, and that stage resumes
//     its own unfinished attempt.
//   - The model a stage uses is the newest committed finetune before it
//     (or the spec's model); the harness is the winner of the newest
//     finished harness phase, chosen from its whole archive by success,
//     then fewer turns, then archive order (or the spec's initial harness).
//     Both are stage inputs or config, so they are part of the identity.
//   - Step holds the lease for the whole stage and renews it; a second
//     Step on the same run gets a *storage.LeaseHeldError naming the holder
//     (RunToEnd with Runner.Wait waits for it instead). A holder that has
//     ended for certain — its process gone on this host, its Slurm job
//     over — is taken over at once, logged and recorded in the ledger
//     (ledger.KindTakeover); other holders are honoured until expiry.
//   - A stage that fails stops the run: nothing of it is committed, the
//     ledger records the failure, and the next Step retries it. A failed
//     training can instead commit its step untrained (finetune.on_failure:
//     skip). A proposer that yields no valid candidate is not a failure: its
//     stage commits with the rejections, the iteration scores nothing, and
//     the run goes on.
package pipeline

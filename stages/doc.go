// Package stages holds the Stage contract and the runner that executes a
// stage idempotently on top of the storage commit protocol. Each stage
// (rollout, filter, finetune, propose, evaluate) lives in a subpackage and
// implements Stage; stages never import one another and talk only through
// committed artifacts.
//
// Contract:
//   - A Stage is a function of its Identity: the digests of its input
//     manifests, its canonical config, its seed and its shard count. The
//     runner hashes these before Run is called. Spec.Place (schedule,
//     round, section) only labels the rows a stage writes and is not
//     hashed.
//   - Execute runs one shard. A committed stage with the same identity is
//     a no-op that costs a few object reads; a different identity at the
//     same position is ErrInputsDiffer unless Spec.Force, which writes a
//     new attempt and keeps the old one. An unfinished attempt with the
//     same identity is resumed: shards already committed do not run again.
//   - Run writes only through Exec.Create; its files count only once the
//     stage's _MANIFEST.json names them. Run must be safe to repeat: a
//     shard may run twice (a Slurm requeue), and only one try commits.
//   - Commit steps run under a fresh bounded context detached from the
//     caller's, so cancelling a run never leaves half a commit.
package stages

// Package slurm submits whale stages to Slurm and watches them.
//
// A Renderer fills the sbatch templates of jobs/slurm (or a site's copies)
// from a Spec: directives are computed and validated in Go, so a rendered
// script never carries a newline or shell syntax from a field, nor a
// credential: an environment name that looks like one, or a URL in the
// command, an environment value or a vLLM argument from which
// redact.Check would hide something, is refused. Scheduler is
// the small contract the pipeline uses; Client implements it with sbatch,
// scancel, squeue and scontrol (no accounting needed: sacct is never
// called), and Fake implements it in memory for unit tests.
//
// Contract of Client: Submit runs once and is never retried (a timed-out
// sbatch may still have queued the job; look it up by name with Jobs);
// reads retry briefly when the controller is busy. Cancelling a finished or
// unknown job is not an error. State returns ErrUnknownJob for a job the
// controller has forgotten (MinJobAge after it ended, 300 s by default):
// the stage's committed manifest, not Slurm, is then the truth. Errors name
// the command and carry its stderr.
package slurm

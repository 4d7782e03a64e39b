package pipeline

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/whalerun/whale/pipeline/ledger"
	"github.com/whalerun/whale/scheduler/slurm"
	"github.com/whalerun/whale/storage"
)

// LeaseTTL is how long a run's lease lasts without renewal when
// Runner.LeaseTTL is 0; Step renews it every third of that while a stage
// runs. A holder that has ended for certain (see storage.AcquireLease and
// Runner.Jobs) is taken over at once; one that nothing can check is
// waited for until its lease expires.
var LeaseTTL = 2 * time.Minute

// JobStates reports scheduler jobs: slurm.Client, or a fake in tests.
type JobStates interface {
	// Cluster names the cluster whose jobs State reports.
	Cluster(ctx context.Context) (string, error)
	State(ctx context.Context, id string) (slurm.Job, error)
}

// slurmJobPrefix starts LeaseRecord.Job for a holder that ran in a Slurm
// job: slurm:<cluster>:<job id>.
const slurmJobPrefix = "slurm:"

// acquire takes the run's lease. A live lease whose holder has ended —
// its process gone on this host, or its Slurm job over — is taken over
// at once: the takeover is logged and recorded in the ledger.
func (r *Runner) acquire(ctx context.Context) (*storage.Lease, error) {
	ttl := r.LeaseTTL
	if ttl == 0 {
		ttl = LeaseTTL
	}
	lease, err := storage.AcquireLease(ctx, r.Store, "runs/"+r.Run+"/lease", storage.LeaseOptions{
		Holder: r.holder(), TTL: ttl, Job: thisSlurmJob(), Ended: r.jobEnded,
	})
	if err != nil {
		return nil, err
	}
	if to := lease.Takeover(); to != nil {
		p := to.Previous
		reason := fmt.Sprintf("took over the lease of %q (host %s, pid %d), live until %s: %s",
			p.Holder, p.Host, p.PID, p.Expires.Format(time.RFC3339), to.Why)
		r.log().Warn("lease taken over from a holder that has ended", "run", r.Run, "holder", p.Holder,
			"host", p.Host, "pid", p.PID, "job", p.Job, "why", to.Why)
		r.record(ctx, ledger.Entry{Kind: ledger.KindTakeover, Reason: reason,
			Signals: map[string]any{"previous_holder": p.Holder, "previous_host": p.Host, "previous_pid": p.PID, "previous_job": p.Job}})
	}
	return lease, nil
}

// thisSlurmJob names the Slurm job this process runs in, "" outside one.
func thisSlurmJob() string {
	id := os.Getenv("SLURM_JOB_ID")
	if id == "" {
		return ""
	}
	return slurmJobPrefix + os.Getenv("SLURM_CLUSTER_NAME") + ":" + id
}

// jobEnded reports whether the Slurm job a lease's holder ran in is over:
// in a terminal state, or forgotten by the controller (it forgets a job
// MinJobAge after it ends). Job ids are per cluster, so it asks only when
// the cluster this machine's Slurm commands talk to is the holder's (by
// name: SLURM_CLUSTER_NAME in a job, else scontrol show config). It
// cannot tell — and says false — for a holder outside Slurm, a job of
// another or an unnamed cluster, or where Slurm's commands fail.
func (r *Runner) jobEnded(ctx context.Context, rec storage.LeaseRecord) (string, bool) {
	rest, ok := strings.CutPrefix(rec.Job, slurmJobPrefix)
	if !ok {
		return "", false
	}
	cluster, id, ok := strings.Cut(rest, ":")
	if !ok || id == "" || cluster == "" {
		return "", false
	}
	jobs := r.Jobs
	if jobs == nil {
		jobs = &slurm.Client{}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	mine := os.Getenv("SLURM_CLUSTER_NAME")
	if mine == "" {
		var err error
		if mine, err = jobs.Cluster(ctx); err != nil {
			r.log().Debug("lease holder's Slurm job: cannot tell which cluster this is", "job", rec.Job, "err", err)
			return "", false
		}
	}
	if mine != cluster {
		return "", false
	}
	j, err := jobs.State(ctx, id)
	switch {
	case errors.Is(err, slurm.ErrUnknownJob):
		return fmt.Sprintf("its Slurm job %s is unknown to the controller (it ended more than MinJobAge ago)", id), true
	case err != nil:
		r.log().Debug("lease holder's Slurm job: cannot tell whether it ended", "job", id, "err", err)
		return "", false
	case j.Done():
		return fmt.Sprintf("its Slurm job %s is %s", id, j.State), true
	}
	return "", false
}

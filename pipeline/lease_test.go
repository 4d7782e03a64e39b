package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/whalerun/whale/pipeline/ledger"
	"github.com/whalerun/whale/scheduler/slurm"
	"github.com/whalerun/whale/storage"
)

// fakeJobs answers State from a table: a state, or an error; its
// cluster is c1.
type fakeJobs map[string]any

func (f fakeJobs) Cluster(context.Context) (string, error) { return "c1", nil }

func (f fakeJobs) State(_ context.Context, id string) (slurm.Job, error) {
	switch v := f[id].(type) {
	case string:
		return slurm.Job{ID: id, State: v}, nil
	case error:
		return slurm.Job{}, v
	}
	return slurm.Job{}, slurm.ErrUnknownJob
}

// TestLeaseOfEndedSlurmJob: a live lease held from a Slurm job on another
// host is taken over once the job is over (terminal, or forgotten by the
// controller), and recorded in the ledger; a job that runs, a job of
// another cluster and a Slurm that cannot be asked are honoured.
func TestLeaseOfEndedSlurmJob(t *testing.T) {
	jobs := fakeJobs{"11": slurm.StateCompleted, "12": slurm.StateRunning, "13": slurm.StateTimeout,
		"14": errors.New("scontrol: command not found"), "15": slurm.StatePending}
	cases := []struct {
		job, cluster string // the holder's job, this process's cluster
		why          string // "": honoured
	}{
		{"slurm:c1:11", "", "its Slurm job 11 is COMPLETED"},
		{"slurm:c1:13", "c1", "its Slurm job 13 is TIMEOUT"},
		{"slurm:c1:99", "", "unknown to the controller"},
		{"slurm:c1:12", "", ""},
		{"slurm:c1:15", "", ""},
		{"slurm:c1:14", "", ""},
		{"slurm:c1:11", "c2", ""},
		{"slurm:c2:11", "", ""},
		{"slurm::11", "", ""},
		{"", "", ""},
		{"pbs:7", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.job+"@"+tc.cluster, func(t *testing.T) {
			t.Setenv("SLURM_CLUSTER_NAME", tc.cluster)
			t.Setenv("SLURM_JOB_ID", "")
			s, err := storage.Open(context.Background(), "mem://", nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			rec := storage.LeaseRecord{Generation: 1, Holder: "whale step (slurm)", Host: "node-7", PID: 10, Job: tc.job,
				Token: "t0", Acquired: time.Now(), Expires: time.Now().Add(time.Hour)}
			data, _ := json.Marshal(rec)
			if err := s.CreateExclusive(ctx, "runs/r/lease/0000000001.json", data); err != nil {
				t.Fatal(err)
			}
			r := &Runner{Planner: Planner{Store: s, Run: "r"}, Jobs: jobs, Log: discard, Holder: "next"}
			l, err := r.acquire(ctx)
			if tc.why == "" {
				if !errors.Is(err, storage.ErrLeaseHeld) {
					t.Fatalf("took over a holder that may run: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if to := l.Takeover(); to == nil || !strings.Contains(to.Why, tc.why) {
				t.Fatalf("takeover %+v, want %q", to, tc.why)
			}
			entries, err := ledger.Read(ctx, s, "r")
			if err != nil || len(entries) != 1 || entries[0].Kind != ledger.KindTakeover ||
				!strings.Contains(entries[0].Reason, `"whale step (slurm)" (host node-7, pid 10)`) || !strings.Contains(entries[0].Reason, tc.why) {
				t.Fatalf("ledger %+v (%v), want one takeover entry", entries, err)
			}
		})
	}
}

// TestLeaseRecordsTheSlurmJob: a process in a Slurm job names it in the
// lease, for the next holder to check.
func TestLeaseRecordsTheSlurmJob(t *testing.T) {
	t.Setenv("SLURM_JOB_ID", "123")
	t.Setenv("SLURM_CLUSTER_NAME", "c1")
	s, err := storage.Open(context.Background(), "mem://", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := &Runner{Planner: Planner{Store: s, Run: "r"}, Log: discard, LeaseTTL: time.Minute}
	l, err := r.acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rec := l.Record(); rec.Job != "slurm:c1:123" || rec.Expires.Sub(rec.Acquired) != time.Minute {
		t.Fatalf("lease %+v, want job slurm:c1:123 for a minute", rec)
	}
}

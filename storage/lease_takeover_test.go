package storage_test

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/whalerun/whale/internal/proc"
	"github.com/whalerun/whale/storage"
)

// TestLeaseTakeover: a live lease whose holder has ended for certain is
// taken over at once; one whose holder runs, or that nothing here can
// judge, is honoured.
func TestLeaseTakeover(t *testing.T) {
	self := proc.Self()
	if self.BootID == "" || self.Start == 0 {
		t.Skip("no /proc here: a holder on this host cannot be judged (TestLeaseTakeoverCannotTell covers it)")
	}
	running := exec.Command("sleep", "60")
	if err := running.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { running.Process.Kill(); running.Wait() })
	alive, err := proc.Of(running.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	ended := exec.Command("sleep", "60")
	if err := ended.Start(); err != nil {
		t.Fatal(err)
	}
	dead, err := proc.Of(ended.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	ended.Process.Kill()
	ended.Wait()
	reused := alive
	reused.Start++ // the pid now names a process started later

	record := func(id proc.Identity, job string) storage.LeaseRecord {
		return storage.LeaseRecord{Generation: 1, Holder: "whale run (crashed)", Host: id.Host, PID: id.PID, UID: id.UID,
			BootID: id.BootID, MachineID: id.MachineID, PIDNamespace: id.PIDNamespace, Start: id.Start, Job: job, Token: "t0",
			Acquired: time.Now(), Expires: time.Now().Add(time.Hour)}
	}
	other := record(proc.Identity{Host: "elsewhere", PID: dead.PID, MachineID: self.MachineID, BootID: "b", PIDNamespace: "pid:[1]", Start: 1}, "")
	jobEnded := func(_ context.Context, r storage.LeaseRecord) (string, bool) {
		if r.Job == "slurm:c:42" {
			return "slurm job 42 is COMPLETED", true
		}
		return "", false
	}
	cases := []struct {
		name  string
		held  storage.LeaseRecord
		ended func(context.Context, storage.LeaseRecord) (string, bool)
		why   string // "" : the lease stays held
	}{
		{"holder ended", record(dead, ""), nil, "no process"},
		{"pid reused", record(reused, ""), nil, "is another process"},
		{"holder running", record(alive, ""), nil, ""},
		{"another host", other, nil, ""},
		{"another machine of the same name", func() storage.LeaseRecord {
			r := record(dead, "")
			r.MachineID, r.BootID = "cloned-vm", "another-boot"
			return r
		}(), nil, ""},
		{"another host, its job over", func() storage.LeaseRecord { r := other; r.Job = "slurm:c:42"; return r }(), jobEnded, "COMPLETED"},
		{"another host, its job running", func() storage.LeaseRecord { r := other; r.Job = "slurm:c:43"; return r }(), jobEnded, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			leaseBackends(t, func(t *testing.T, s *storage.Store) {
				ctx := context.Background()
				data, _ := json.Marshal(tc.held)
				if err := s.CreateExclusive(ctx, "runs/r/lease/0000000001.json", data); err != nil {
					t.Fatal(err)
				}
				l, err := storage.AcquireLease(ctx, s, "runs/r/lease", storage.LeaseOptions{Holder: "next", TTL: time.Minute, Ended: tc.ended})
				if tc.why == "" {
					if !errors.Is(err, storage.ErrLeaseHeld) {
						t.Fatalf("acquired a lease whose holder may run: %v", err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				to := l.Takeover()
				if to == nil || to.Previous.Token != "t0" || !strings.Contains(to.Why, tc.why) {
					t.Fatalf("takeover %+v, want one of t0 saying %q", to, tc.why)
				}
				rec := l.Record()
				if rec.Generation != 2 || rec.BootID != self.BootID || rec.MachineID != self.MachineID || rec.PID != self.PID ||
					rec.UID != self.UID || rec.Start != self.Start {
					t.Fatalf("new generation %+v does not name this process", rec)
				}
				// The new holder is alive: the next one waits.
				if _, err := storage.AcquireLease(ctx, s, "runs/r/lease", storage.LeaseOptions{Holder: "third", TTL: time.Minute}); !errors.Is(err, storage.ErrLeaseHeld) {
					t.Fatalf("took over a live holder: %v", err)
				}
			})
		})
	}
}

// TestLeaseTakeoverCannotTell: generations written before whale recorded
// the holder's process identity are honoured until they expire.
func TestLeaseTakeoverCannotTell(t *testing.T) {
	leaseBackends(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		self := proc.Self()
		old := storage.LeaseRecord{Generation: 1, Holder: "whale step (older whale)", Host: self.Host, PID: 999999999,
			Token: "t0", Acquired: time.Now(), Expires: time.Now().Add(time.Hour)}
		data, _ := json.Marshal(old)
		if err := s.CreateExclusive(ctx, "runs/r/lease/0000000001.json", data); err != nil {
			t.Fatal(err)
		}
		if _, err := storage.AcquireLease(ctx, s, "runs/r/lease", storage.LeaseOptions{Holder: "next", TTL: time.Minute}); !errors.Is(err, storage.ErrLeaseHeld) {
			t.Fatalf("took over a lease it cannot judge: %v", err)
		}
	})
}

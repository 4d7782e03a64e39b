package storage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whalerun/whale/internal/s3test"
	"github.com/whalerun/whale/storage"
	"github.com/whalerun/whale/storage/storagetest"
)

// leaseBackends runs fn on a fresh prefix of every backend; the S3 one
// needs versitygw.
func leaseBackends(t *testing.T, fn func(t *testing.T, s *storage.Store)) {
	backends := []struct {
		name string
		root func(t *testing.T) string
	}{
		{"mem", func(t *testing.T) string { return "mem://lease-" + storagetest.RandomHex(4) }},
		{"file", func(t *testing.T) string { return "file://" + t.TempDir() }},
		{"s3", func(t *testing.T) string { return s3test.NewBucketURL(t) }},
	}
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			fn(t, storagetest.OpenUnder(t, b.root(t), &storage.Options{Retry: &fastRetry}))
		})
	}
}

func generationKeys(t *testing.T, s *storage.Store, folder string) []string {
	t.Helper()
	var keys []string
	if err := s.List(context.Background(), folder+"/", false, func(e storage.Entry) error {
		keys = append(keys, e.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

func TestLeaseAcquireRelease(t *testing.T) {
	leaseBackends(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		if _, ok, err := storage.ReadLease(ctx, s, "runs/r1/lease"); ok || err != nil {
			t.Fatalf("ReadLease of no lease: ok %v, %v", ok, err)
		}
		a, err := storage.AcquireLease(ctx, s, "runs/r1/lease/", storage.LeaseOptions{Holder: "whale step", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		rec := a.Record()
		host, _ := os.Hostname()
		if rec.Generation != 1 || rec.Holder != "whale step" || rec.Host != host || rec.PID != os.Getpid() || rec.Token == "" ||
			!rec.Live(time.Now()) || rec.Expires.Sub(rec.Acquired) != time.Minute {
			t.Fatalf("record %+v", rec)
		}
		got, ok, err := storage.ReadLease(ctx, s, "runs/r1/lease")
		if err != nil || !ok || got != rec {
			t.Fatalf("ReadLease = %+v, %v, %v; want %+v", got, ok, err, rec)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.Release(ctx); err != nil {
			t.Fatalf("second Release: %v", err)
		}
		if err := a.Renew(ctx); err == nil {
			t.Fatal("Renew after Release succeeded")
		}
		got, _, _ = storage.ReadLease(ctx, s, "runs/r1/lease")
		if !got.Released || got.Generation != 2 || got.Live(time.Now()) {
			t.Fatalf("after Release: %+v", got)
		}
		b, err := storage.AcquireLease(ctx, s, "runs/r1/lease", storage.LeaseOptions{Holder: "whale run", TTL: time.Minute})
		if err != nil {
			t.Fatalf("acquire after release: %v", err)
		}
		if r := b.Record(); r.Generation != 3 || r.Holder != "whale run" || r.Token == rec.Token {
			t.Fatalf("second holder's record %+v", r)
		}
		// The record is plain JSON with the documented fields.
		raw, err := s.ReadAll(ctx, "runs/r1/lease/0000000003.json")
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"generation", "holder", "host", "pid", "token", "acquired", "expires", "released"} {
			if _, ok := m[f]; !ok {
				t.Errorf("lease JSON lacks %q: %s", f, raw)
			}
		}
	})
}

func TestLeaseLiveIsRefused(t *testing.T) {
	leaseBackends(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		a, err := storage.AcquireLease(ctx, s, "runs/r2/lease", storage.LeaseOptions{Holder: "cron tick 1", TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		_, err = storage.AcquireLease(ctx, s, "runs/r2/lease", storage.LeaseOptions{Holder: "cron tick 2", TTL: time.Hour})
		if !errors.Is(err, storage.ErrLeaseHeld) {
			t.Fatalf("second acquire: %v, want ErrLeaseHeld", err)
		}
		var held *storage.LeaseHeldError
		if !errors.As(err, &held) || held.Current.Token != a.Record().Token {
			t.Fatalf("err %#v, want a *LeaseHeldError naming the first holder", err)
		}
		msg := err.Error()
		rec := a.Record()
		for _, want := range []string{"runs/r2/lease", s.URL(), `"cron tick 1"`, rec.Host, fmt.Sprint(rec.PID),
			rec.Expires.Format(time.RFC3339), "wait for it to finish", "expires"} {
			if !strings.Contains(msg, want) {
				t.Errorf("message %q lacks %q", msg, want)
			}
		}
		if got, _, _ := storage.ReadLease(ctx, s, "runs/r2/lease"); got != rec {
			t.Fatalf("a refused acquire changed the lease: %+v", got)
		}
	})
}

func TestLeaseExpiredIsTakenOver(t *testing.T) {
	leaseBackends(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		a, err := storage.AcquireLease(ctx, s, "runs/r3/lease", storage.LeaseOptions{Holder: "crashed", TTL: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		b, err := storage.AcquireLease(ctx, s, "runs/r3/lease", storage.LeaseOptions{Holder: "next", TTL: time.Minute})
		if err != nil {
			t.Fatalf("acquire of an expired lease: %v", err)
		}
		if b.Record().Generation != 2 {
			t.Fatalf("taker's record %+v", b.Record())
		}
		err = a.Renew(ctx)
		if !errors.Is(err, storage.ErrLeaseLost) || !strings.Contains(err.Error(), `"next"`) {
			t.Fatalf("Renew after takeover: %v, want ErrLeaseLost naming the new holder", err)
		}
		if err := a.Release(ctx); !errors.Is(err, storage.ErrLeaseLost) {
			t.Fatalf("Release after takeover: %v, want ErrLeaseLost", err)
		}
		if got, _, _ := storage.ReadLease(ctx, s, "runs/r3/lease"); got != b.Record() {
			t.Fatalf("the loser changed the lease: %+v", got)
		}
		if err := b.Renew(ctx); err != nil {
			t.Fatalf("the taker's Renew: %v", err)
		}
	})
}

func TestLeaseRenewAndPrune(t *testing.T) {
	leaseBackends(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		a, err := storage.AcquireLease(ctx, s, "l", storage.LeaseOptions{Holder: "h", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		first := a.Record()
		for range 10 {
			time.Sleep(2 * time.Millisecond)
			if err := a.Renew(ctx); err != nil {
				t.Fatal(err)
			}
		}
		r := a.Record()
		if r.Generation != 11 || r.Token != first.Token || !r.Acquired.Equal(first.Acquired) || !r.Expires.After(first.Expires) {
			t.Fatalf("after 10 renewals: %+v (first %+v)", r, first)
		}
		if keys := generationKeys(t, s, "l"); len(keys) > 4 || keys[len(keys)-1] != "l/0000000011.json" {
			t.Fatalf("generations kept: %q", keys)
		}
	})
}

// TestLeaseRenewIntoPrunedGap: a holder that slept through its expiry while
// another took over, renewed and pruned must not come back by writing a
// generation the pruning freed.
func TestLeaseRenewIntoPrunedGap(t *testing.T) {
	leaseBackends(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		a, err := storage.AcquireLease(ctx, s, "gap", storage.LeaseOptions{Holder: "sleeper", TTL: 30 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(60 * time.Millisecond)
		b, err := storage.AcquireLease(ctx, s, "gap", storage.LeaseOptions{Holder: "worker", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		for range 6 {
			if err := b.Renew(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if ok, _ := s.Exists(ctx, "gap/0000000002.json"); ok {
			t.Fatal("test premise: generation 2 should have been pruned")
		}
		if err := a.Renew(ctx); !errors.Is(err, storage.ErrLeaseLost) || !strings.Contains(err.Error(), `"worker"`) {
			t.Fatalf("Renew into a pruned gap: %v, want ErrLeaseLost naming the worker", err)
		}
		if got, _, _ := storage.ReadLease(ctx, s, "gap"); got != b.Record() {
			t.Fatalf("lease after the sleeper's attempt: %+v, want the worker's %+v", got, b.Record())
		}
	})
}

// TestLeaseAdoptsLandedRenewal: a renewal that landed although its request
// reported a failure is recognised by its token, not taken for a loss.
func TestLeaseAdoptsLandedRenewal(t *testing.T) {
	leaseBackends(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		a, err := storage.AcquireLease(ctx, s, "adopt", storage.LeaseOptions{Holder: "h", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ghost := a.Record()
		ghost.Generation = 2
		ghost.Expires = ghost.Expires.Add(time.Second)
		data, _ := json.Marshal(ghost)
		if err := s.CreateExclusive(ctx, "adopt/0000000002.json", data); err != nil {
			t.Fatal(err)
		}
		if err := a.Renew(ctx); err != nil {
			t.Fatalf("Renew over our own landed generation: %v", err)
		}
		if g := a.Record().Generation; g != 3 {
			t.Fatalf("generation %d after renewing over our own generation 2, want 3", g)
		}
	})
}

func TestLeaseKeepAlive(t *testing.T) {
	leaseBackends(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		a, err := storage.AcquireLease(ctx, s, "ka", storage.LeaseOptions{Holder: "worker", TTL: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		wctx, stop := a.KeepAlive(ctx, 0)
		time.Sleep(700 * time.Millisecond)
		if wctx.Err() != nil {
			t.Fatalf("work context ended while the lease was renewed: %v", context.Cause(wctx))
		}
		if _, err := storage.AcquireLease(ctx, s, "ka", storage.LeaseOptions{Holder: "other", TTL: time.Minute}); !errors.Is(err, storage.ErrLeaseHeld) {
			t.Fatalf("acquire while kept alive: %v, want ErrLeaseHeld", err)
		}
		if g := a.Record().Generation; g < 3 {
			t.Fatalf("generation %d after 700ms of heartbeats at 100ms", g)
		}
		stop()
		if err := a.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := storage.AcquireLease(ctx, s, "ka", storage.LeaseOptions{Holder: "other", TTL: time.Minute}); err != nil {
			t.Fatalf("acquire after release: %v", err)
		}
	})
}

func TestLeaseKeepAliveReportsLoss(t *testing.T) {
	leaseBackends(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		a, err := storage.AcquireLease(ctx, s, "lost", storage.LeaseOptions{Holder: "worker", TTL: 300 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		wctx, stop := a.KeepAlive(ctx, 50*time.Millisecond)
		defer stop()
		// An intruder writes the next generation, as a taker would after
		// an expiry the worker did not notice.
		next := a.Record()
		next.Generation++
		next.Holder, next.Token = "intruder", "other-token"
		data, _ := json.Marshal(next)
		if err := s.CreateExclusive(ctx, fmt.Sprintf("lost/%010d.json", next.Generation), data); err != nil {
			t.Fatal(err)
		}
		select {
		case <-wctx.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("work context not cancelled after the lease was lost")
		}
		if cause := context.Cause(wctx); !errors.Is(cause, storage.ErrLeaseLost) || !strings.Contains(cause.Error(), "intruder") {
			t.Fatalf("cause %v, want ErrLeaseLost naming the intruder", cause)
		}
	})
}

// TestLeaseGoroutineRace: goroutines of one process racing for one lease;
// the process race is TestLeaseRace.
func TestLeaseGoroutineRace(t *testing.T) {
	leaseBackends(t, func(t *testing.T, s *storage.Store) {
		ctx := context.Background()
		for round := range 3 {
			folder := fmt.Sprintf("race-%d", round)
			var wins, held int
			var mu sync.Mutex
			var wg sync.WaitGroup
			for g := range 16 {
				wg.Go(func() {
					_, err := storage.AcquireLease(ctx, s, folder, storage.LeaseOptions{Holder: fmt.Sprint("g", g), TTL: time.Minute})
					mu.Lock()
					defer mu.Unlock()
					switch {
					case err == nil:
						wins++
					case errors.Is(err, storage.ErrLeaseHeld):
						held++
					default:
						t.Errorf("goroutine %d: %v", g, err)
					}
				})
			}
			wg.Wait()
			if wins != 1 || held != 15 {
				t.Fatalf("round %d: %d winners, %d refused; want 1 and 15", round, wins, held)
			}
		}
	})
}

func TestLeaseBadInput(t *testing.T) {
	s := storagetest.OpenUnder(t, "mem://", nil)
	ctx := context.Background()
	tests := []struct {
		folder, holder string
		ttl            time.Duration
	}{
		{"", "h", time.Minute},
		{"../x", "h", time.Minute},
		{"a//b", "h", time.Minute},
		{"ok", "", time.Minute},
		{"ok", "h", 0},
		{"ok", "h", -time.Second},
	}
	for _, tc := range tests {
		if _, err := storage.AcquireLease(ctx, s, tc.folder, storage.LeaseOptions{Holder: tc.holder, TTL: tc.ttl}); err == nil {
			t.Errorf("AcquireLease(%q, %q, %s) succeeded", tc.folder, tc.holder, tc.ttl)
		}
	}
	// A corrupt newest generation stops acquirers with a message naming it.
	if err := s.WriteAll(ctx, "bad/0000000001.json", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	_, err := storage.AcquireLease(ctx, s, "bad", storage.LeaseOptions{Holder: "h", TTL: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "bad/0000000001.json") {
		t.Fatalf("acquire over a corrupt record: %v", err)
	}
	// Files that are not generations are ignored.
	for _, k := range []string{"odd/notes.txt", "odd/1.json", "odd/00000000001x.json", "odd/sub/0000000009.json"} {
		if err := s.WriteAll(ctx, k, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	l, err := storage.AcquireLease(ctx, s, "odd", storage.LeaseOptions{Holder: "h", TTL: time.Minute})
	if err != nil || l.Record().Generation != 1 {
		t.Fatalf("acquire beside stray files: %v", err)
	}
}

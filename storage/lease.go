package storage

// Leases.
//
// DESIGN.md §2 names one key, runs/<run>/lease, rewritten by its holder.
// Taking over an expired lease then needs a compare-and-swap (replace the
// key only if it still holds what we read), which not every backend offers
// atomically: fileblob has none, s3blob has no If-Match on writes. What
// every backend does offer atomically is create-if-absent
// (CreateExclusive). So a lease here is a folder of append-only
// generations, <folder>/0000000001.json, 0000000002.json, …, and the
// newest generation is the lease. Every change — acquire, renew, take
// over, release — creates the next generation exclusively, so of two
// writers racing for generation n+1 exactly one wins, and the loser learns
// it from ErrExists. Old generations are pruned; a reader that lags behind
// the pruning could create a generation in the pruned gap, so every
// writer lists the folder after its create and counts only if its
// generation is the newest.
//
// A crashed holder: a live generation whose holder has ended may be
// taken over before it expires. AcquireLease checks a holder on the same
// host and machine itself (internal/proc: the machine rebooted after the
// holder started, or, in the same boot, PID namespace and user, no
// process of its id started at its time); LeaseOptions.Ended may add what
// the caller can check (a scheduler job that is over). Every check
// answers "cannot tell" rather than guess, and a holder nothing can check
// is honoured until expiry. Were a takeover wrong all the same, both
// processes would run stages until the old holder's next renewal (a
// third of the TTL) found its generation taken and stopped it
// (ErrLeaseLost); the commit protocol keeps what they commit consistent,
// but work outside the bucket (a trainer, a reload) may run twice.

// Clock skew: a generation's expiry is computed on the writer's clock and
// compared with the reader's. Hosts whose clocks differ by d see a lease
// expire up to d early or late, so ttl must be much longer than any skew
// between the machines that share a root (minutes, for NTP-synced hosts
// with skews under a second).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/whalerun/whale/internal/proc"
)

var (
	// ErrLeaseHeld: another holder's lease is live. The error is a
	// *LeaseHeldError that says who holds it and until when.
	ErrLeaseHeld = errors.New("lease is held by another process")
	// ErrLeaseLost: another holder took the lease over (ours expired), so
	// work done under it must stop.
	ErrLeaseLost = errors.New("lease lost")
	// errLeaseReleased is returned by Renew after Release.
	errLeaseReleased = errors.New("lease already released")
)

// leaseKeep is how many generations survive pruning.
const leaseKeep = 4

// LeaseRecord is one generation of a lease as stored.
type LeaseRecord struct {
	Generation int64  `json:"generation"`
	Holder     string `json:"holder"`
	Host       string `json:"host"`
	PID        int    `json:"pid"`
	// Token is random per acquisition and kept by renewals: it, not the
	// holder's name, tells whose a generation is.
	Token    string    `json:"token"`
	Acquired time.Time `json:"acquired"`
	Expires  time.Time `json:"expires"` // on the writer's clock
	Released bool      `json:"released"`
	// BootID, MachineID, PIDNamespace, Start and UID name the holder's
	// process on Host
	// (see internal/proc), so that another process there can tell that it
	// has ended. Empty in generations written before whale recorded them.
	BootID       string `json:"boot_id,omitempty"`
	MachineID    string `json:"machine_id,omitempty"`
	PIDNamespace string `json:"pid_ns,omitempty"`
	Start        uint64 `json:"start,omitempty"`
	// UID is the holder's user id (meaningful with MachineID set).
	UID int `json:"uid"`
	// Job is the scheduler job the holder ran in (LeaseOptions.Job).
	Job string `json:"job,omitempty"`
}

// process is the identity of the record's holder process.
func (r LeaseRecord) process() proc.Identity {
	return proc.Identity{Host: r.Host, PID: r.PID, UID: r.UID, MachineID: r.MachineID, BootID: r.BootID, PIDNamespace: r.PIDNamespace, Start: r.Start}
}

// LeaseOptions say who takes a lease, for how long, and how to tell that
// a live holder has ended.
type LeaseOptions struct {
	// Holder is a name for humans, such as "whale step". Required.
	Holder string
	// TTL is how long the lease lasts without renewal. Required.
	TTL time.Duration
	// Job names the scheduler job this process runs in, if any, for
	// Ended to check later (e.g. "slurm:<cluster>:<job id>").
	Job string
	// Ended, when set, is asked about a live lease of another holder
	// that AcquireLease could not judge itself: it reports whether the
	// holder has ended for certain, and why. It must answer false when
	// it cannot tell.
	Ended func(ctx context.Context, rec LeaseRecord) (why string, ended bool)
}

// Takeover says whose live lease AcquireLease took over, and why.
type Takeover struct {
	Previous LeaseRecord
	Why      string
}

// Live reports whether the record holds the lease at now.
func (r LeaseRecord) Live(now time.Time) bool {
	return !r.Released && now.Before(r.Expires)
}

// LeaseHeldError is returned when a live lease belongs to someone else.
type LeaseHeldError struct {
	URL     string // redacted root
	Folder  string
	Current LeaseRecord
	Now     time.Time // the reader's clock when it decided
}

func (e *LeaseHeldError) Error() string {
	c := e.Current
	left := c.Expires.Sub(e.Now).Round(time.Second)
	return fmt.Sprintf("lease %s on %s is held by %q (host %s, pid %d) since %s, until %s (%s from now): "+
		"another process is working on this; wait for it to finish, or, if that process is gone, "+
		"retry after the lease expires at %s",
		e.Folder, e.URL, c.Holder, c.Host, c.PID, c.Acquired.Format(time.RFC3339),
		c.Expires.Format(time.RFC3339), left, c.Expires.Format(time.RFC3339))
}

func (e *LeaseHeldError) Unwrap() error { return ErrLeaseHeld }

// Lease is a held lease. Its methods are safe for concurrent use.
type Lease struct {
	s      *Store
	folder string
	ttl    time.Duration

	mu  sync.Mutex // serializes changes; held across their requests
	rec LeaseRecord
	err error // set once the lease is lost or released

	takeover *Takeover
}

// AcquireLease takes the lease in folder (e.g. "runs/r1/lease") for
// o.Holder for o.TTL. It succeeds when the folder has no lease, or its
// newest generation is released or expired, or its holder has ended for
// certain (see above; Lease.Takeover then says whose and why); a live
// lease of someone else gives a *LeaseHeldError (errors.Is ErrLeaseHeld)
// that names the holder. Racing acquirers on any backend get exactly one
// winner. When the store fails after the new generation was written but
// before that was confirmed, the error is returned and the lease stays
// taken until the TTL runs out, as if this process had crashed.
func AcquireLease(ctx context.Context, s *Store, folder string, o LeaseOptions) (*Lease, error) {
	folder = strings.Trim(folder, "/")
	if err := checkKey(folder); err != nil {
		return nil, fmt.Errorf("acquire lease: folder: %w", err)
	}
	if o.TTL <= 0 {
		return nil, fmt.Errorf("acquire lease %s: ttl must be positive, got %s", folder, o.TTL)
	}
	if o.Holder == "" {
		return nil, fmt.Errorf("acquire lease %s: holder must be named", folder)
	}
	me := proc.Self()
	l := &Lease{s: s, folder: folder, ttl: o.TTL}
	token := newToken()
	// Each turn of the loop is lost to another writer that made progress,
	// so the loop ends; the bound only guards against a bug.
	for try := 0; ; try++ {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("acquire lease %s: %w", folder, err)
		}
		if try == 100 {
			return nil, fmt.Errorf("acquire lease %s on %s: lost 100 races in a row; is something rewriting the folder?", folder, s.url)
		}
		gens, err := l.generations(ctx)
		if err != nil {
			return nil, fmt.Errorf("acquire lease %s: %w", folder, err)
		}
		var cur LeaseRecord
		if len(gens) > 0 {
			top := gens[len(gens)-1]
			cur, err = l.read(ctx, top)
			if errors.Is(err, ErrNotFound) {
				continue // pruned under us: the folder moved on
			}
			if err != nil {
				return nil, fmt.Errorf("acquire lease %s: %w", folder, err)
			}
		}
		now := leaseNow()
		var takeover *Takeover
		if cur.Live(now) {
			why, ended := cur.process().Gone(me, cur.Acquired)
			if !ended && o.Ended != nil {
				why, ended = o.Ended(ctx, cur)
			}
			if !ended {
				return nil, &LeaseHeldError{URL: s.url, Folder: folder, Current: cur, Now: now}
			}
			takeover = &Takeover{Previous: cur, Why: why}
		}
		next := LeaseRecord{Generation: cur.Generation + 1, Holder: o.Holder, Host: me.Host, PID: me.PID,
			BootID: me.BootID, MachineID: me.MachineID, PIDNamespace: me.PIDNamespace, Start: me.Start, UID: me.UID, Job: o.Job,
			Token: token, Acquired: now, Expires: now.Add(o.TTL)}
		outcome, _, err := l.create(ctx, next)
		if err != nil {
			return nil, fmt.Errorf("acquire lease %s: %w", folder, err)
		}
		if outcome != created {
			continue
		}
		l.rec, l.takeover = next, takeover
		for _, g := range gens {
			if g <= next.Generation-leaseKeep {
				l.prune(ctx, g)
			}
		}
		return l, nil
	}
}

// ReadLease returns the newest generation of the lease in folder; ok is
// false when there is none.
func ReadLease(ctx context.Context, s *Store, folder string) (rec LeaseRecord, ok bool, err error) {
	folder = strings.Trim(folder, "/")
	if err := checkKey(folder); err != nil {
		return LeaseRecord{}, false, fmt.Errorf("read lease: folder: %w", err)
	}
	l := &Lease{s: s, folder: folder}
	for range 10 {
		gens, err := l.generations(ctx)
		if err != nil || len(gens) == 0 {
			return LeaseRecord{}, false, err
		}
		rec, err := l.read(ctx, gens[len(gens)-1])
		if errors.Is(err, ErrNotFound) {
			continue
		}
		return rec, err == nil, err
	}
	return LeaseRecord{}, false, fmt.Errorf("read lease %s on %s: the newest generation kept vanishing", folder, s.url)
}

// Record returns the lease's current generation.
func (l *Lease) Record() LeaseRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rec
}

// Takeover says whose live lease AcquireLease took over because its
// holder had ended, and why; nil when the lease was free or expired.
func (l *Lease) Takeover() *Takeover { return l.takeover }

// Folder is the lease's folder key.
func (l *Lease) Folder() string { return l.folder }

// Renew extends the lease by its ttl from now, by writing the next
// generation. It returns an error wrapping ErrLeaseLost when another holder
// has taken the lease over; other errors (the store unreachable) leave the
// lease as it was, to be renewed again before it expires.
func (l *Lease) Renew(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.advance(ctx, false)
}

// Release ends the lease by writing a released generation, so that the
// next acquirer need not wait for the expiry. It runs even when ctx is
// already cancelled (a Ctrl-C must not leave the lease held), bounded by
// 30 s. Releasing twice is fine; releasing a lost lease returns an error
// wrapping ErrLeaseLost.
func (l *Lease) Release(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	if errors.Is(l.err, errLeaseReleased) {
		return nil
	}
	return l.advance(ctx, true)
}

// advance writes the generation after l.rec: a renewal, or a release.
// l.mu is held.
func (l *Lease) advance(ctx context.Context, release bool) error {
	if l.err != nil {
		return l.err
	}
	for range 10 {
		now := leaseNow()
		next := l.rec
		next.Generation++
		next.Expires = now.Add(l.ttl)
		if release {
			next.Expires, next.Released = now, true
		}
		outcome, newest, err := l.create(ctx, next)
		if err != nil {
			return fmt.Errorf("%s lease %s: %w", map[bool]string{false: "renew", true: "release"}[release], l.folder, err)
		}
		switch outcome {
		case taken:
			other, rerr := l.read(ctx, next.Generation)
			if rerr == nil && other.Token == l.rec.Token {
				// An earlier renewal of ours landed though it reported a
				// failure: build on it.
				l.rec = other
				continue
			}
			l.err = l.lost(next.Generation, other, rerr)
			return l.err
		case behind:
			other, rerr := l.read(ctx, newest)
			l.err = l.lost(newest, other, rerr)
			return l.err
		}
		l.rec = next
		l.prune(ctx, next.Generation-leaseKeep)
		if release {
			l.err = errLeaseReleased
		}
		return nil
	}
	return fmt.Errorf("renew lease %s on %s: generations keep appearing with our token; is this lease used from two processes?", l.folder, l.s.url)
}

func (l *Lease) lost(gen int64, other LeaseRecord, readErr error) error {
	if readErr != nil {
		return fmt.Errorf("%w: lease %s on %s: generation %d was written by another holder", ErrLeaseLost, l.folder, l.s.url, gen)
	}
	return fmt.Errorf("%w: lease %s on %s was taken over by %q (host %s, pid %d) at %s after ours expired at %s; stop work done under it",
		ErrLeaseLost, l.folder, l.s.url, other.Holder, other.Host, other.PID,
		other.Acquired.Format(time.RFC3339), l.rec.Expires.Format(time.RFC3339))
}

// KeepAlive renews the lease every interval (ttl/3 when interval <= 0)
// until ctx ends or stop is called. Work done under the lease should run
// under the returned context: it is cancelled, with a cause wrapping
// ErrLeaseLost (see context.Cause), when the lease is lost, or when
// renewals keep failing until the lease would expire before the next one.
// stop ends the heartbeat and waits for it; call it before Release.
func (l *Lease) KeepAlive(ctx context.Context, interval time.Duration) (context.Context, context.CancelFunc) {
	if interval <= 0 {
		interval = l.ttl / 3
	}
	wctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			err := l.Renew(wctx)
			switch {
			case err == nil:
			case errors.Is(err, ErrLeaseLost), errors.Is(err, errLeaseReleased):
				cancel(err)
				return
			case wctx.Err() != nil:
				return
			default:
				exp := l.Record().Expires
				if leaseNow().Add(interval).After(exp) {
					cancel(fmt.Errorf("%w: lease %s on %s could not be renewed before it expires at %s: %w",
						ErrLeaseLost, l.folder, l.s.url, exp.Format(time.RFC3339), err))
					return
				}
				slog.Warn("storage: lease renewal failed; retrying", "lease", l.folder, "expires", exp, "err", err)
			}
		}
	}()
	return wctx, func() {
		cancel(context.Canceled)
		<-done
	}
}

// generations lists the folder and returns its generations in ascending
// order, ignoring anything that is not a generation file.
func (l *Lease) generations(ctx context.Context) ([]int64, error) {
	var gens []int64
	err := l.s.List(ctx, l.folder+"/", true, func(e Entry) error {
		if g, ok := parseGeneration(strings.TrimPrefix(e.Key, l.folder+"/")); ok && !e.IsDir {
			gens = append(gens, g)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Lexical order is numeric order only while the widths agree.
	slices.Sort(gens)
	return gens, nil
}

// parseGeneration reads "0000000042.json" as 42.
func parseGeneration(name string) (int64, bool) {
	digits, ok := strings.CutSuffix(name, ".json")
	if !ok || len(digits) < 10 || len(digits) > 19 {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	g, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || g <= 0 || generationName(g) != name {
		return 0, false
	}
	return g, true
}

func generationName(g int64) string { return fmt.Sprintf("%010d.json", g) }

func (l *Lease) key(g int64) string { return l.folder + "/" + generationName(g) }

func (l *Lease) read(ctx context.Context, g int64) (LeaseRecord, error) {
	key := l.key(g)
	data, err := l.s.ReadAll(ctx, key)
	if err != nil {
		return LeaseRecord{}, err
	}
	var rec LeaseRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return LeaseRecord{}, fmt.Errorf("lease record %s on %s is not valid JSON (%v); if no process holds this lease, delete the folder %s", key, l.s.url, err, l.folder)
	}
	if rec.Generation != g || rec.Token == "" {
		return LeaseRecord{}, fmt.Errorf("lease record %s on %s says generation %d with token %q; if no process holds this lease, delete the folder %s", key, l.s.url, rec.Generation, rec.Token, l.folder)
	}
	return rec, nil
}

// Outcomes of create.
type createOutcome int

const (
	created createOutcome = iota // rec is the newest generation
	taken                        // its generation existed already
	behind                       // rec landed in a pruned gap below a newer generation
)

// create writes rec as its generation exclusively, then checks that no
// newer generation exists: one written after the pruning of rec's
// generation would make rec a dead record.
func (l *Lease) create(ctx context.Context, rec LeaseRecord) (createOutcome, int64, error) {
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return 0, 0, err
	}
	err = l.s.CreateExclusive(ctx, l.key(rec.Generation), append(data, '\n'))
	if errors.Is(err, ErrExists) {
		return taken, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	gens, err := l.generations(ctx)
	if err != nil {
		return 0, 0, err
	}
	if len(gens) == 0 {
		return 0, 0, fmt.Errorf("lease %s on %s: generation %d vanished right after it was written; is something deleting the folder?", l.folder, l.s.url, rec.Generation)
	}
	if newest := gens[len(gens)-1]; newest > rec.Generation {
		slog.Debug("storage: lease generation created behind a newer one", "lease", l.folder, "generation", rec.Generation, "newest", newest)
		l.prune(ctx, rec.Generation)
		return behind, newest, nil
	}
	return created, rec.Generation, nil
}

// prune deletes generation g, best effort: a leftover costs a few bytes.
func (l *Lease) prune(ctx context.Context, g int64) {
	if g <= 0 {
		return
	}
	if err := l.s.Delete(ctx, l.key(g)); err != nil {
		slog.Debug("storage: pruning lease generation failed", "key", l.key(g), "err", err)
	}
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// leaseNow is the clock of lease records, to the millisecond so that the
// JSON stays short.
func leaseNow() time.Time { return time.Now().UTC().Truncate(time.Millisecond) }

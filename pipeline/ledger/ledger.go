// Package ledger is a run's append-only log of planner decisions and stage
// outcomes: runs/<run>/ledger/000001.json, 000002.json, ... Each entry is
// one object created exclusively, so two writers never overwrite each
// other and a reader sees a prefix of the history. The planner itself reads
// committed manifests, not the ledger: the ledger says who decided what,
// when and why (and which Slurm jobs ran it), for people and reports.
package ledger

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/whalerun/whale/storage"
)

// Kinds of entries.
const (
	KindDecision = "decision" // the planner chose the next stage
	KindStage    = "stage"    // a stage committed (or was already committed)
	KindFailure  = "failure"  // a stage failed; Error says why
	KindJobs     = "jobs"     // scheduler jobs were submitted for a stage
	KindDone     = "done"     // the schedule ended
	KindTakeover = "takeover" // the lease was taken from a holder that had ended; Reason says whose and why
)

// Entry is one line of the ledger.
type Entry struct {
	Seq      int            `json:"seq"`
	Time     time.Time      `json:"time"`
	Kind     string         `json:"kind"`
	Position string         `json:"position,omitempty"`
	Stage    string         `json:"stage,omitempty"`
	Reason   string         `json:"reason,omitempty"`
	Signals  map[string]any `json:"signals,omitempty"`
	// Folder is the committed stage folder, for KindStage.
	Folder string `json:"folder,omitempty"`
	// Summary is the stage's summary, for KindStage.
	Summary map[string]any `json:"summary,omitempty"`
	Error   string         `json:"error,omitempty"`
	// Jobs are scheduler job ids, for KindJobs.
	Jobs []string `json:"jobs,omitempty"`
	// Holder is who wrote the entry (host, pid), as in the lease.
	Holder string `json:"holder,omitempty"`
}

// Prefix is the folder of run's ledger.
func Prefix(run string) string { return "runs/" + run + "/ledger/" }

const digits = 6

func key(run string, seq int) string {
	return Prefix(run) + fmt.Sprintf("%0*d.json", digits, seq)
}

// Append writes e as the next entry of run's ledger and returns it with Seq
// and Time set. Concurrent appenders each get their own sequence number.
func Append(ctx context.Context, s *storage.Store, run string, e Entry) (Entry, error) {
	last, err := lastSeq(ctx, s, run)
	if err != nil {
		return Entry{}, err
	}
	if e.Time.IsZero() {
		e.Time = time.Now().UTC()
	}
	for seq := last + 1; ; seq++ {
		e.Seq = seq
		data, err := json.MarshalIndent(e, "", "  ")
		if err != nil {
			return Entry{}, fmt.Errorf("ledger entry %d of run %s: %w", seq, run, err)
		}
		err = s.CreateExclusive(ctx, key(run, seq), append(data, '\n'))
		if err == nil {
			return e, nil
		}
		if !errors.Is(err, storage.ErrExists) {
			return Entry{}, fmt.Errorf("append to ledger of run %s: %w", run, err)
		}
	}
}

func lastSeq(ctx context.Context, s *storage.Store, run string) (int, error) {
	last := 0
	err := s.List(ctx, Prefix(run), false, func(en storage.Entry) error {
		if seq, ok := parseName(path.Base(en.Key)); ok && seq > last {
			last = seq
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("list ledger of run %s: %w", run, err)
	}
	return last, nil
}

func parseName(name string) (int, bool) {
	num, ok := strings.CutSuffix(name, ".json")
	if !ok || len(num) < digits {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 {
		return 0, false
	}
	return n, true
}

// Read returns run's ledger in sequence order. An entry that does not
// decode is an error naming its key: the ledger is written only by whale.
func Read(ctx context.Context, s *storage.Store, run string) ([]Entry, error) {
	var keys []string
	err := s.List(ctx, Prefix(run), false, func(en storage.Entry) error {
		if _, ok := parseName(path.Base(en.Key)); ok {
			keys = append(keys, en.Key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list ledger of run %s: %w", run, err)
	}
	out := make([]Entry, 0, len(keys))
	for _, k := range keys {
		data, err := s.ReadAll(ctx, k)
		if err != nil {
			return nil, fmt.Errorf("read ledger entry: %w", err)
		}
		var e Entry
		if err := json.Unmarshal(data, &e); err != nil {
			return nil, fmt.Errorf("ledger entry %s: %w", k, err)
		}
		out = append(out, e)
	}
	// List returns keys in lexical order; zero-padded names sort by number
	// up to 999999 entries, and parse order fixes the rest.
	slices.SortFunc(out, func(a, b Entry) int { return cmp.Compare(a.Seq, b.Seq) })
	return out, nil
}

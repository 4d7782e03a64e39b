package storage

import "sync/atomic"

// Stats counts the requests a Store made, so that tests and benchmarks can
// say what an operation cost in object-store calls (an idempotent rerun
// should cost a couple of reads, not a rescan).
type Stats struct {
	Reads, Writes, Lists, Stats, Deletes int64
}

type counters struct {
	reads, writes, lists, stats, deletes atomic.Int64
}

// Stats returns the requests made so far, each retry of the Store
// included (on s3:// the SDK's own retries within one try are not seen).
func (s *Store) Stats() Stats {
	return Stats{
		Reads:   s.n.reads.Load(),
		Writes:  s.n.writes.Load(),
		Lists:   s.n.lists.Load(),
		Stats:   s.n.stats.Load(),
		Deletes: s.n.deletes.Load(),
	}
}

// Package children keeps the process groups whale starts that would
// outlive it if it exited at once: a trainer or reload command runs in a
// group of its own (so that a cancel reaches its whole tree) and has no
// parent-death signal. A process about to exit without cleaning up — a
// second Ctrl-C or SIGTERM — kills them first (KillAll), so that an
// orphaned trainer does not keep its GPUs.
//
// Sandboxed children (bubblewrap's --die-with-parent) need no entry.
package children

import (
	"sync"
	"syscall"
)

var (
	mu     sync.Mutex
	groups = map[int]int{} // pgid -> how many registrations
)

// Add registers the process group pgid until the returned func is
// called (when the group's leader has been waited for).
func Add(pgid int) (remove func()) {
	mu.Lock()
	groups[pgid]++
	mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			if groups[pgid]--; groups[pgid] <= 0 {
				delete(groups, pgid)
			}
			mu.Unlock()
		})
	}
}

// KillAll sends SIGKILL to every registered process group.
func KillAll() {
	mu.Lock()
	defer mu.Unlock()
	for pgid := range groups {
		syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

package modeltest

import "time"

// schedule books a server's slots (see SetSlots) in model time, as a GPU
// runs a batch: a call takes the slot that frees first, begins when it
// frees (or when the call arrives, if later) and ends its Delay after
// that, whenever the fake server's goroutines get to run. Freeing slots
// with timers instead made the server's own lateness part of every call:
// in one process with the client on 2 busy cores a 50 ms call held its
// slot 51.5-52.5 ms, so no client could use more than ~0.96 of what the
// slots serve, and the endpoint utilisation benchmark measured the fake
// server's wake-ups rather than the client. The lateness is still there,
// in when replies are written (Server.Late), but a late reply no longer
// delays the next call on its slot.
//
// Bookings are made in arrival order, so their begins never decrease: a
// slot's earlier bookings end before its latest begins, and the latest
// bookings are all that can cover a new call's begin. A call whose client
// goes away keeps its booking; its slot is not given back early.
type schedule struct {
	begin, end []time.Time // each slot's latest booking
}

func newSchedule(n int) *schedule {
	return &schedule{begin: make([]time.Time, n), end: make([]time.Time, n)}
}

// book books a call of duration d arriving at now (never before the
// previous call's now) and returns its begin and end and how many
// bookings, its own included, cover its begin: never more than the slots.
func (q *schedule) book(now time.Time, d time.Duration) (begin, end time.Time, running int) {
	slot := 0
	for i := range q.end {
		if q.end[i].Before(q.end[slot]) {
			slot = i
		}
	}
	begin = q.end[slot]
	if begin.Before(now) {
		begin = now
	}
	end = begin.Add(d)
	running = 1
	for i := range q.end {
		if i != slot && !begin.Before(q.begin[i]) && begin.Before(q.end[i]) {
			running++
		}
	}
	q.begin[slot], q.end[slot] = begin, end
	return begin, end, running
}

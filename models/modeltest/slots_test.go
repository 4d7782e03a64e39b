package modeltest

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestScheduleBooks(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type call struct{ arrive, dur, begin, running int }
	for _, tc := range []struct {
		name  string
		slots int
		calls []call
	}{
		{"free slots begin at arrival", 2, []call{{0, 50, 0, 1}, {10, 50, 10, 2}}},
		{"a queued call takes the slot that frees first", 2, []call{{0, 50, 0, 1}, {10, 30, 10, 2}, {20, 50, 40, 2}, {21, 50, 50, 2}}},
		// The late reply of the first call does not move the second:
		// the slot is booked from 50 ms whenever the server wakes.
		{"back to back on one slot", 1, []call{{0, 50, 0, 1}, {1, 50, 50, 1}, {2, 50, 100, 1}}},
		{"an idle slot waits for the next arrival", 1, []call{{0, 50, 0, 1}, {80, 50, 80, 1}}},
		{"zero-length calls queue too", 1, []call{{0, 50, 0, 1}, {10, 0, 50, 1}, {20, 50, 50, 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newSchedule(tc.slots)
			for i, c := range tc.calls {
				begin, end, running := q.book(at(c.arrive), time.Duration(c.dur)*time.Millisecond)
				if !begin.Equal(at(c.begin)) || end.Sub(begin) != time.Duration(c.dur)*time.Millisecond || running != c.running {
					t.Fatalf("call %d: begins %v, lasts %v, %d running; want %d ms, %d ms, %d",
						i, begin.Sub(t0), end.Sub(begin), running, c.begin, c.dur, c.running)
				}
			}
		})
	}
}

// TestScheduleRandom checks the schedule against its definition over
// random arrivals: no call begins before it arrives, no more calls than
// slots overlap at any time, a call waits only while every slot is
// taken, and book's running count is the true overlap at the begin.
func TestScheduleRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	t0 := time.Unix(1000, 0)
	for trial := range 200 {
		n := 1 + r.IntN(5)
		q := newSchedule(n)
		type booking struct{ arrive, begin, end time.Time }
		var bs []booking
		now := t0
		for range 60 {
			now = now.Add(time.Duration(r.IntN(20)) * time.Millisecond)
			d := time.Duration(r.IntN(60)) * time.Millisecond
			begin, end, running := q.book(now, d)
			if begin.Before(now) || end.Sub(begin) != d {
				t.Fatalf("trial %d: call arriving %v booked %v-%v for %v", trial, now.Sub(t0), begin.Sub(t0), end.Sub(t0), d)
			}
			// running: the bookings so far covering begin, and this one.
			over := 1
			busy := 0 // bookings covering the arrival
			for _, b := range bs {
				if !begin.Before(b.begin) && begin.Before(b.end) {
					over++
				}
				if !now.Before(b.begin) && now.Before(b.end) {
					busy++
				}
			}
			if over != running || over > n {
				t.Fatalf("trial %d: %d bookings cover %v, book says %d, %d slots", trial, over, begin.Sub(t0), running, n)
			}
			if begin.After(now) && busy < n {
				t.Fatalf("trial %d: call arriving %v waits to %v with %d of %d slots busy", trial, now.Sub(t0), begin.Sub(t0), busy, n)
			}
			bs = append(bs, booking{now, begin, end})
		}
	}
}

package analysis

import "hash/maphash"

// idTable indexes the dense ids 0..n-1 of things whose keys the caller
// keeps (cells, task ids, strings): an open-addressing table with linear
// probing that stores only id+1 per slot. At most half full, it takes 8
// bytes or less per key, a fraction of what a Go map of the same keys
// takes, which matters for the (group, task) pairs that make up most of
// an analysis's memory.
type idTable struct {
	slots []int32
	n     int
}

// find returns the id for which match is true among those hashed to h, or
// -1 and the slot where a new id with hash h goes.
func (t *idTable) find(h uint64, match func(id int32) bool) (int32, int) {
	if len(t.slots) == 0 {
		t.slots = make([]int32, 16)
	}
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := t.slots[i]
		if s == 0 {
			return -1, int(i)
		}
		if match(s - 1) {
			return s - 1, -1
		}
	}
}

// insert records id n (the next one) at slot, as returned by find, and
// grows the table, rehashing every id with hash, when it is half full.
func (t *idTable) insert(slot int, hash func(id int32) uint64) {
	t.slots[slot] = int32(t.n) + 1
	t.n++
	if 2*t.n <= len(t.slots) {
		return
	}
	t.slots = make([]int32, 2*len(t.slots))
	mask := uint64(len(t.slots) - 1)
	for id := range int32(t.n) {
		i := hash(id) & mask
		for t.slots[i] != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = id + 1
	}
}

// reset empties the table, keeping its memory.
func (t *idTable) reset() {
	clear(t.slots)
	t.n = 0
}

var seed = maphash.MakeSeed()

func hashString(s string) uint64 { return maphash.String(seed, s) }

// hashKey mixes a 64-bit key (splitmix64's finalizer).
func hashKey(x uint64) uint64 {
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

package local

import (
	"container/list"
	"slices"
	"sync"
	"sync/atomic"
)

// PrefixCache keeps the keys and values of sequences a model decoded
// recently, so that a prompt which starts like one of them (an episode's
// next turn: the last prompt, the model's reply, the tool's result) is fed
// to the network only from where the two part, as vLLM's automatic prefix
// caching does. A row's keys and values depend only on the tokens up to it
// and the decoder computes every row on its own, whatever else is in the
// step, so a prompt gets the same tokens with the cache as without it
// (TestPrefixCacheSameTokens). One cache may serve several models: entries
// are keyed by the model and its optimiser step, so a trained model never
// reads its old weights' rows. Safe for concurrent use.
type PrefixCache struct {
	mu     sync.Mutex
	limit  int64
	used   int64
	blocks map[uint64]*prefixEntry // chained hash of a block-aligned prefix → the newest entry holding it
	lru    list.List               // of *prefixEntry, most recently used first

	lookups, reusedRows, fedRows atomic.Int64
}

// prefixBlock is the granularity of the index: prefixes are found by the
// hashes of their first k·prefixBlock tokens, then extended token by token
// within the entry found.
const prefixBlock = 16

type prefixEntry struct {
	tokens []int     // the tokens whose rows are held
	kv     []float32 // keys then values: Layers × Heads × len(tokens) × head width each
	hashes []uint64  // hashes[k] indexes tokens[:(k+1)·prefixBlock]
	live   int       // hashes whose index slot still names this entry
	elem   *list.Element
}

// NewPrefixCache makes a cache that holds at most limit bytes of keys and
// values; the least recently used sequences go first.
func NewPrefixCache(limit int64) *PrefixCache {
	return &PrefixCache{limit: limit, blocks: map[uint64]*prefixEntry{}}
}

// PrefixStats counts what a cache saved: rows are prompt tokens.
type PrefixStats struct {
	Lookups    int64 // prompts looked up
	ReusedRows int64 // prompt rows copied from the cache
	FedRows    int64 // prompt rows the network computed
}

// Stats reports the counts since the cache was made.
func (c *PrefixCache) Stats() PrefixStats {
	return PrefixStats{Lookups: c.lookups.Load(), ReusedRows: c.reusedRows.Load(), FedRows: c.fedRows.Load()}
}

// prefixHashes returns the chained hashes of tokens' whole blocks under
// key (the model's identity and step).
func prefixHashes(key uint64, tokens []int) []uint64 {
	hs := make([]uint64, 0, len(tokens)/prefixBlock)
	h := mix64(key)
	for b := 0; b+prefixBlock <= len(tokens); b += prefixBlock {
		for _, t := range tokens[b : b+prefixBlock] {
			h = mix64(h ^ uint64(t))
		}
		hs = append(hs, h)
	}
	return hs
}

// mix64 is splitmix64's finaliser: a bijection that spreads every input
// bit. Collisions are harmless: a found entry's tokens are compared.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// lookup finds the entry sharing the longest prefix with prompt, at most
// len(prompt)-1 tokens so that the last prompt token is always fed (its
// logits start the reply). It returns nil and 0 when none shares a block.
func (c *PrefixCache) lookup(key uint64, prompt []int) (*prefixEntry, int) {
	c.lookups.Add(1)
	usable := prompt[:len(prompt)-1]
	hs := prefixHashes(key, usable)
	c.mu.Lock()
	defer c.mu.Unlock()
	var e *prefixEntry
	for _, h := range hs {
		f := c.blocks[h]
		if f == nil {
			break
		}
		e = f
	}
	if e == nil {
		return nil, 0
	}
	n := 0
	for n < len(usable) && n < len(e.tokens) && usable[n] == e.tokens[n] {
		n++
	}
	if n < prefixBlock {
		return nil, 0 // a hash collision
	}
	c.lru.MoveToFront(e.elem)
	return e, n
}

// store adds a decoded sequence's rows; kv is laid out as in prefixEntry
// and is owned by the cache from now on.
func (c *PrefixCache) store(key uint64, tokens []int, kv []float32) {
	size := int64(4 * len(kv))
	if len(tokens) < prefixBlock || size > c.limit {
		return
	}
	e := &prefixEntry{tokens: tokens, kv: kv, hashes: prefixHashes(key, tokens)}
	c.mu.Lock()
	defer c.mu.Unlock()
	e.elem = c.lru.PushFront(e)
	c.used += size
	// The newest sequence takes over every block it shares. One left with
	// no block is unreachable (a lookup lands on the entry of the last
	// block it finds), so it goes at once: an episode's second turn frees
	// its first, whose rows it holds too.
	for _, h := range e.hashes {
		if old := c.blocks[h]; old != nil {
			if old.live--; old.live == 0 {
				c.drop(old)
			}
		}
		c.blocks[h] = e
		e.live++
	}
	for c.used > c.limit {
		c.evict(c.lru.Back().Value.(*prefixEntry))
	}
}

// evict drops e and its index slots.
func (c *PrefixCache) evict(e *prefixEntry) {
	for _, h := range e.hashes {
		if c.blocks[h] == e {
			delete(c.blocks, h)
		}
	}
	c.drop(e)
}

// drop forgets e, whose index slots name other entries or are gone.
func (c *PrefixCache) drop(e *prefixEntry) {
	c.lru.Remove(e.elem)
	c.used -= int64(4 * len(e.kv))
}

// modelIDs numbers models for PrefixCache keys.
var modelIDs atomic.Uint64

// cacheKey names the model's current weights: they change only in
// TrainStep, which advances step.
func (m *Model) cacheKey() uint64 {
	return mix64(mix64(m.id) ^ uint64(m.step))
}

// reuse copies into sequence i's caches the rows of the longest prefix of
// prompt the cache holds and returns its length.
func (dc *decoder) reuse(cache *PrefixCache, key uint64, i int, prompt []int) int {
	e, n := cache.lookup(key, prompt)
	cache.reusedRows.Add(int64(n))
	cache.fedRows.Add(int64(len(prompt) - n))
	if e == nil {
		return 0
	}
	hd := dc.cfg.DModel / dc.cfg.Heads
	blocks := dc.cfg.Layers * dc.cfg.Heads
	capa, held := len(dc.kc[i])/(blocks*hd), len(e.tokens)
	vals := e.kv[blocks*held*hd:]
	for b := 0; b < blocks; b++ {
		copy(dc.kc[i][b*capa*hd:b*capa*hd+n*hd], e.kv[b*held*hd:])
		copy(dc.vc[i][b*capa*hd:b*capa*hd+n*hd], vals[b*held*hd:])
	}
	return n
}

// offer gives the cache the rows of sequence i's fed tokens.
func (dc *decoder) offer(cache *PrefixCache, key uint64, i int, fed []int) {
	hd := dc.cfg.DModel / dc.cfg.Heads
	blocks := dc.cfg.Layers * dc.cfg.Heads
	capa, n := len(dc.kc[i])/(blocks*hd), len(fed)
	kv := make([]float32, 2*blocks*n*hd)
	for b := 0; b < blocks; b++ {
		copy(kv[b*n*hd:(b+1)*n*hd], dc.kc[i][b*capa*hd:])
		copy(kv[(blocks+b)*n*hd:(blocks+b+1)*n*hd], dc.vc[i][b*capa*hd:])
	}
	cache.store(key, slices.Clone(fed), kv)
}

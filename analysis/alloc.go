package analysis

import (
	"math/bits"
	"sync"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// bufferPool is an Arrow allocator that recycles the buffers of released
// record batches: decoding a million rows then reuses a few batches' worth
// of buffers instead of leaving a new batch's worth of garbage per batch
// for the collector, and the heap stays flat however many rows are read.
// Buffers come in power-of-two sizes, 64-byte aligned and zeroed as Go's
// allocator gives them. A pool lives for one AddFiles call.
type bufferPool struct {
	mu     sync.Mutex
	free   [64][][]byte
	pooled int // bytes in free
}

var _ memory.Allocator = (*bufferPool)(nil)

const (
	minBufferClass = 6 // 64 bytes
	// maxPooled bounds the bytes of free buffers kept.
	maxPooled = 4 << 20
	alignment = 64
)

func bufferClass(size int) int {
	if size <= 1<<minBufferClass {
		return minBufferClass
	}
	return bits.Len(uint(size - 1))
}

func (p *bufferPool) Allocate(size int) []byte {
	c := bufferClass(size)
	p.mu.Lock()
	var b []byte
	if n := len(p.free[c]); n > 0 {
		b = p.free[c][n-1]
		p.free[c][n-1] = nil
		p.free[c] = p.free[c][:n-1]
		p.pooled -= cap(b)
	}
	p.mu.Unlock()
	if b == nil {
		raw := make([]byte, 1<<c+alignment)
		shift := int(-uintptr(unsafe.Pointer(unsafe.SliceData(raw))) & (alignment - 1))
		return raw[shift : shift+size : shift+1<<c]
	}
	b = b[:size]
	clear(b)
	return b
}

func (p *bufferPool) Reallocate(size int, b []byte) []byte {
	if size <= cap(b) {
		if size > len(b) {
			clear(b[len(b):size])
		}
		return b[:size]
	}
	nb := p.Allocate(size)
	copy(nb, b)
	p.Free(b)
	return nb
}

func (p *bufferPool) Free(b []byte) {
	c := bufferClass(cap(b))
	if cap(b) != 1<<c || uintptr(unsafe.Pointer(unsafe.SliceData(b)))&(alignment-1) != 0 {
		return // not one of ours: the collector has it
	}
	p.mu.Lock()
	if p.pooled+cap(b) <= maxPooled {
		p.free[c] = append(p.free[c], b[:0])
		p.pooled += cap(b)
	}
	p.mu.Unlock()
}

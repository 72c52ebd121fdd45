package proxy

import (
	"sync"
	"sync/atomic"
)

// buf is a pooled frame buffer. A frame's buffer is owned by exactly one
// goroutine at a time: the reader fills it, the outbox writes and frees it.
//
// st packs a generation (high bits, advanced each time the buffer is
// recycled) with a state (low 2 bits): free, queued, writing or withdrawn.
// A ticket names one generation, so a stale ticket can never touch a
// recycled buffer.
type buf struct {
	b  []byte
	st atomic.Uint64
	// sent counts the bytes of b (newline included, once queued) already
	// written; the outbox finishes the rest.
	sent int
}

const (
	bufFree uint64 = iota
	bufQueued
	bufWriting
	bufWithdrawn
	stateMask = 3
)

// ticket identifies a frame handed to an outbox, to ask later whether it has
// been written, or to withdraw it.
type ticket struct {
	b   *buf
	gen uint64
}

// valid reports whether the ticket names a frame.
func (t ticket) valid() bool { return t.b != nil }

// withdraw takes the frame out of the queue if it has not begun to be
// written, and reports whether it did.
func (t ticket) withdraw() bool {
	return t.b != nil && t.b.st.CompareAndSwap(t.gen<<2|bufQueued, t.gen<<2|bufWithdrawn)
}

// written reports whether the frame has been written, or is being written.
func (t ticket) written() bool {
	if t.b == nil {
		return false
	}
	v := t.b.st.Load()
	return v>>2 != t.gen || v&stateMask == bufWriting
}

// maxPooled keeps the largest frames' buffers out of the pool; the pool
// itself is emptied by the garbage collector when buffers go unused.
const maxPooled = 8 << 20

var bufPool = sync.Pool{New: func() any { return &buf{b: make([]byte, 0, 4<<10)} }}

func getBuf() *buf { return bufPool.Get().(*buf) }

// putBuf recycles b under a new generation.
func putBuf(b *buf) {
	gen := b.st.Load() >> 2
	b.st.Store((gen + 1) << 2)
	b.sent = 0
	if cap(b.b) <= maxPooled {
		b.b = b.b[:0]
		bufPool.Put(b)
	}
}

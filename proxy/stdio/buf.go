package stdio

import (
	"sync"
	"sync/atomic"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
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
	// done, if set, is called once b has been written whole (a cancel's
	// notification: the upstream is told); never when b is dropped.
	done func()
	// about and last, on a frame for the client, are the request it is
	// about and whether it is that request's last message (see
	// Options.Deliver); nil for other traffic.
	about *proxy.Call
	last  bool
	// opens and cancels, on a frame for a server that takes messages
	// (Sender), are the request it opens and the request whose cancel it
	// is; msg is the frame parsed, when hasMsg (its bytes unchanged).
	opens, cancels *proxy.Call
	msg            framing.Message
	hasMsg         bool
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

// keep stores the ticket with its request, in the call's transport slot.
func (t ticket) keep(c *proxy.Call) { c.Transport = proxy.Slot{Ref: t.b, Seq: t.gen} }

// ticketOf returns the ticket kept with a request (the zero ticket, which
// names no frame, if none was kept).
func ticketOf(c *proxy.Call) ticket {
	b, _ := c.Transport.Ref.(*buf)
	return ticket{b, c.Transport.Seq}
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

// Frame buffers are recycled in two sync.Pools, by size, so that a small
// frame is not read into a large buffer: steady traffic reuses them and
// allocates nothing, and the collector frees what goes unused, so that
// one burst of frames does not pin memory for good. (A bounded free list
// on a channel, which the collector left alone, cost 7% of the relay's
// CPU in its locks; the pools, lock-free per P, cost next to nothing.)
const (
	smallCap  = 64 << 10 // the largest buffer kept in the small pool
	newCap    = 8 << 10  // a new buffer's capacity: most frames fit
	maxPooled = 8 << 20  // the largest buffer kept at all
)

var smallPool, largePool sync.Pool

// getBuf returns an empty buffer with room for a typical frame.
func getBuf() *buf {
	if b, _ := smallPool.Get().(*buf); b != nil {
		return b
	}
	return &buf{b: make([]byte, 0, newCap)}
}

// getBufFor returns an empty buffer with room for n bytes.
func getBufFor(n int) *buf {
	if n <= smallCap {
		return getBuf()
	}
	if b, _ := largePool.Get().(*buf); b != nil {
		if cap(b.b) >= n {
			return b
		}
		putBuf(b)
	}
	return &buf{b: make([]byte, 0, n)}
}

// written recycles b, written whole, after calling its done.
func written(b *buf) {
	if f := b.done; f != nil {
		b.done = nil
		f()
	}
	putBuf(b)
}

// putBuf recycles b under a new generation.
func putBuf(b *buf) {
	b.done, b.about, b.last = nil, nil, false
	b.opens, b.cancels, b.hasMsg = nil, nil, false
	gen := b.st.Load() >> 2
	b.st.Store((gen + 1) << 2)
	b.sent = 0
	b.b = b.b[:0]
	switch c := cap(b.b); {
	case c <= smallCap:
		smallPool.Put(b)
	case c <= maxPooled:
		largePool.Put(b)
	}
}

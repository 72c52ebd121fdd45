package wire

import (
	"sync"
	"sync/atomic"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// buf is a pooled frame buffer. A frame's buffer is owned by exactly one
// goroutine at a time: the reader fills it, the Outbox writes and frees it.
//
// st packs a generation (high bits, advanced each time the buffer is
// recycled) with a state (low 2 bits): free, queued, writing or withdrawn.
// A Ticket names one generation, so a stale Ticket can never touch a
// recycled buffer.
type Buf struct {
	B  []byte
	st atomic.Uint64
	// sent counts the bytes of b (newline included, once queued) already
	// written; the Outbox finishes the rest.
	sent int
	// done, if set, is called once b has been written whole (a cancel's
	// notification: the upstream is told); never when b is dropped.
	Done func()
	// about and last, on a frame for the client, are the request it is
	// about and whether it is that request's last message (see
	// Options.Deliver); nil for other traffic.
	About *proxy.Call
	Last  bool
	// opens and cancels, on a frame for a server that takes messages
	// (Sender), are the request it opens and the request whose cancel it
	// is; msg is the frame parsed, when hasMsg (its bytes unchanged).
	Opens, Cancels *proxy.Call
	Msg            framing.Message
	HasMsg         bool
}

const (
	bufFree uint64 = iota
	bufQueued
	bufWriting
	bufWithdrawn
	stateMask = 3
)

// Ticket identifies a frame handed to an Outbox, to ask later whether it has
// been written, or to withdraw it.
type Ticket struct {
	b   *Buf
	gen uint64
}

// Keep stores the Ticket with its request, in the call's transport slot.
func (t Ticket) Keep(c *proxy.Call) { c.Transport = proxy.Slot{Ref: t.b, Seq: t.gen} }

// TicketOf returns the Ticket kept with a request (the zero Ticket, which
// names no frame, if none was kept).
func TicketOf(c *proxy.Call) Ticket {
	b, _ := c.Transport.Ref.(*Buf)
	return Ticket{b, c.Transport.Seq}
}

// Withdraw takes the frame out of the queue if it has not begun to be
// written, and reports whether it did.
func (t Ticket) Withdraw() bool {
	return t.b != nil && t.b.st.CompareAndSwap(t.gen<<2|bufQueued, t.gen<<2|bufWithdrawn)
}

// Written reports whether the frame has been written, or is being written.
func (t Ticket) Written() bool {
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

// GetBuf returns an empty buffer with room for a typical frame.
func GetBuf() *Buf {
	if b, _ := smallPool.Get().(*Buf); b != nil {
		return b
	}
	return &Buf{B: make([]byte, 0, newCap)}
}

// GetBufFor returns an empty buffer with room for n bytes.
func GetBufFor(n int) *Buf {
	if n <= smallCap {
		return GetBuf()
	}
	if b, _ := largePool.Get().(*Buf); b != nil {
		if cap(b.B) >= n {
			return b
		}
		PutBuf(b)
	}
	return &Buf{B: make([]byte, 0, n)}
}

// written recycles b, written whole, after calling its done.
func written(b *Buf) {
	if f := b.Done; f != nil {
		b.Done = nil
		f()
	}
	PutBuf(b)
}

// PutBuf recycles b under a new generation.
func PutBuf(b *Buf) {
	b.Done, b.About, b.Last = nil, nil, false
	b.Opens, b.Cancels, b.HasMsg = nil, nil, false
	gen := b.st.Load() >> 2
	b.st.Store((gen + 1) << 2)
	b.sent = 0
	b.B = b.B[:0]
	switch c := cap(b.B); {
	case c <= smallCap:
		smallPool.Put(b)
	case c <= maxPooled:
		largePool.Put(b)
	}
}

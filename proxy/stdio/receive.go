package stdio

import (
	"sync"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/wire"
)

// Pusher is a server that hands the session its frames itself, each
// whole, from goroutines of its own (an upstream connection's streams,
// each read by the goroutine that waits for it), in place of an In that
// the session reads: no queue between them, and no hand-off to a reader
// of the session's. Run gives it the session's Receiver before the client
// can send anything, and runs until the Receiver's End.
type Pusher interface {
	PushTo(r Receiver)
}

// Receiver takes the frames a Pusher hands the session.
type Receiver interface {
	// Receive decides one frame of the server's (one line: no newline
	// in it) and carries it out, as Run does with each line it reads; the
	// frame is copied. parsed, if not nil, is frame parsed already (one
	// message, whose Raw is frame), which the session then need not parse
	// again; it is the session's until Receive returns. Any goroutine may
	// call it, the frames of one stream in their order.
	Receive(frame []byte, parsed *framing.Frame)
	// ReceiveBuf is Receive of the frame b holds (b.B, one line), which
	// the session takes, b with it, and does not copy. more says the next
	// frame is at hand already: what was decided may wait for it, to be
	// written a burst at a time, as Run writes the bursts it reads.
	ReceiveBuf(b *wire.Buf, more bool)
	// TooLarge answers for a frame of the server's over the size limit,
	// which was skipped, as Run does for a line it reads.
	TooLarge(tl *framing.FrameTooLargeError)
	// End says no frame comes after those received: the server's output
	// has ended, as when a server's In ends.
	End()
}

// receiver is the Session's Receiver (for a server that pushes).
type receiver struct {
	s *Session
	// then is called once, at the end of the server's frames (End). It
	// must not block: End may be called under its caller's locks.
	then func()
	once sync.Once
}

// parsed holds the frames Receive parses into, for reuse.
var parsed = sync.Pool{New: func() any { return new(framing.Frame) }}

// Receive implements Receiver.
func (r *receiver) Receive(frame []byte, already *framing.Frame) {
	if len(frame) == 0 {
		return
	}
	b := wire.GetBufFor(len(frame) + 1)
	b.B = append(b.B[:0], frame...)
	from := r.s.sides[proxy.Server]
	if already != nil && !already.Batch && len(already.Msgs) == 1 {
		already.Raw, already.Msgs[0].Raw = b.B, b.B // its spans index the copy as they did frame
		r.s.decideLocked(from, already, b)          // a server's frame: handleFrame takes no lock for it either
	} else {
		f := parsed.Get().(*framing.Frame)
		r.s.handleFrame(from, f, b)
		parsed.Put(f)
	}
	from.out.Flush()
}

// ReceiveBuf implements Receiver.
func (r *receiver) ReceiveBuf(b *wire.Buf, more bool) {
	from := r.s.sides[proxy.Server]
	if len(b.B) == 0 {
		wire.PutBuf(b)
	} else {
		f := parsed.Get().(*framing.Frame)
		r.s.handleFrame(from, f, b)
		parsed.Put(f)
	}
	if !more {
		from.out.Flush()
	}
}

// TooLarge implements Receiver.
func (r *receiver) TooLarge(tl *framing.FrameTooLargeError) {
	from := r.s.sides[proxy.Server]
	r.s.tooLarge(from, tl)
	from.out.Flush()
}

// End implements Receiver.
func (r *receiver) End() { r.once.Do(r.then) }

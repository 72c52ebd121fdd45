package proxy

import (
	"io"
	"sync"
	"sync/atomic"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
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

// maxPooled keeps huge frames' buffers out of the pool.
const maxPooled = 1 << 20

var bufPool = sync.Pool{New: func() any { return &buf{b: make([]byte, 0, 4<<10)} }}

func getBuf() *buf { return bufPool.Get().(*buf) }

// putBuf recycles b under a new generation.
func putBuf(b *buf) {
	gen := b.st.Load() >> 2
	b.st.Store((gen + 1) << 2)
	if cap(b.b) <= maxPooled {
		b.b = b.b[:0]
		bufPool.Put(b)
	}
}

// outboxDepth bounds the frames queued toward one peer. When the peer stops
// reading, the queue fills and the relay pushes back on the sender.
const outboxDepth = 256

// outbox owns the writing side of one peer: a goroutine that drains a queue
// of frames into a framing.Writer, flushing whenever the queue runs empty.
// Urgent frames (cancels whose request has already been written) go ahead
// of everything queued, so that a cancel never waits behind other frames.
type outbox struct {
	q       chan *buf
	urgent  chan *buf
	closing chan struct{} // closed by close: drain what is queued, then stop
	dead    chan struct{} // closed when run returns
	w       *framing.Writer
	c       io.Closer
	once    sync.Once
	err     error // the write error that stopped run, if any; read after dead
}

func newOutbox(w io.WriteCloser) *outbox {
	return &outbox{
		q:       make(chan *buf, outboxDepth),
		urgent:  make(chan *buf, outboxDepth),
		closing: make(chan struct{}),
		dead:    make(chan struct{}),
		w:       framing.NewWriter(w),
		c:       w,
	}
}

// send queues a frame and returns its ticket; the outbox takes ownership of
// b. When the outbox has stopped, b is freed and the ticket is invalid.
func (o *outbox) send(b *buf) ticket { return o.enqueue(o.q, b) }

// sendUrgent queues a frame ahead of every frame not yet being written.
func (o *outbox) sendUrgent(b *buf) ticket { return o.enqueue(o.urgent, b) }

func (o *outbox) enqueue(q chan *buf, b *buf) ticket {
	gen := b.st.Load() >> 2
	b.st.Store(gen<<2 | bufQueued)
	select {
	case q <- b:
		return ticket{b, gen}
	case <-o.dead:
		putBuf(b)
		return ticket{}
	}
}

// sendBytes copies p into a pooled buffer and queues it.
func (o *outbox) sendBytes(p []byte) ticket {
	b := getBuf()
	b.b = append(b.b, p...)
	return o.send(b)
}

// close asks the outbox to write what is queued, close its writer and stop.
// It does not wait; receive from dead for that.
func (o *outbox) close() { o.once.Do(func() { close(o.closing) }) }

// run is the outbox's goroutine. It exits after close (once the queues are
// drained) or on the first write error, and closes the underlying writer.
func (o *outbox) run() {
	defer close(o.dead)
	defer o.c.Close()
	for {
		var b *buf
		select { // urgent frames first
		case b = <-o.urgent:
		default:
			select {
			case b = <-o.urgent:
			case b = <-o.q:
			case <-o.closing:
				o.drain()
				return
			}
		}
		if !o.write(b) {
			return
		}
	}
}

// drain writes what is left in both queues, urgent first, and flushes.
func (o *outbox) drain() {
	for {
		select {
		case b := <-o.urgent:
			if !o.write(b) {
				return
			}
			continue
		default:
		}
		select {
		case b := <-o.q:
			if !o.write(b) {
				return
			}
		default:
			o.err = o.w.Flush()
			return
		}
	}
}

// write writes one frame, unless it was withdrawn, and flushes once both
// queues are empty.
func (o *outbox) write(b *buf) bool {
	gen := b.st.Load() >> 2
	if !b.st.CompareAndSwap(gen<<2|bufQueued, gen<<2|bufWriting) {
		putBuf(b) // withdrawn
		return true
	}
	err := o.w.Write(b.b)
	putBuf(b)
	if err == nil && len(o.q) == 0 && len(o.urgent) == 0 {
		err = o.w.Flush()
	}
	if err != nil {
		o.err = err
		return false
	}
	return true
}

package proxy

import (
	"io"
	"sync"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// buf is a pooled frame buffer. A frame's buffer is owned by exactly one
// goroutine at a time: the reader fills it, the outbox writes and frees it.
type buf struct{ b []byte }

// maxPooled keeps huge frames' buffers out of the pool.
const maxPooled = 1 << 20

var bufPool = sync.Pool{New: func() any { return &buf{b: make([]byte, 0, 4<<10)} }}

func getBuf() *buf { return bufPool.Get().(*buf) }

func putBuf(b *buf) {
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
type outbox struct {
	q       chan *buf
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
		closing: make(chan struct{}),
		dead:    make(chan struct{}),
		w:       framing.NewWriter(w),
		c:       w,
	}
}

// send queues a frame; the outbox takes ownership of b. It reports false,
// freeing b, when the outbox has stopped.
func (o *outbox) send(b *buf) bool {
	select {
	case o.q <- b:
		return true
	case <-o.dead:
		putBuf(b)
		return false
	}
}

// sendBytes copies p into a pooled buffer and queues it.
func (o *outbox) sendBytes(p []byte) bool {
	b := getBuf()
	b.b = append(b.b, p...)
	return o.send(b)
}

// close asks the outbox to write what is queued, close its writer and stop.
// It does not wait; receive from dead for that.
func (o *outbox) close() { o.once.Do(func() { close(o.closing) }) }

// run is the outbox's goroutine. It exits after close (once the queue is
// drained) or on the first write error, and closes the underlying writer.
func (o *outbox) run() {
	defer close(o.dead)
	defer o.c.Close()
	for {
		select {
		case b := <-o.q:
			if !o.write(b) {
				return
			}
		case <-o.closing:
			for {
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
	}
}

// write writes one frame and flushes once the queue is empty.
func (o *outbox) write(b *buf) bool {
	err := o.w.Write(b.b)
	putBuf(b)
	if err == nil && len(o.q) == 0 {
		err = o.w.Flush()
	}
	if err != nil {
		o.err = err
		return false
	}
	return true
}

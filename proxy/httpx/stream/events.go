package stream

import (
	"io"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/joinwrite"
)

// Backlog bounds the bytes of notifications and server requests queued for
// a client that does not read its stream; answers to its requests are
// always queued (there are only as many as its requests).
const Backlog = 8 << 20

// Events is one response stream to the client that a session of lines
// feeds (its demux.Route). It is the response body: fasthttp's server reads
// it, and writes and flushes each event as a chunk. Its feeder never waits
// for the client: events queue, and only those beyond Backlog that are not
// answers are dropped. Its state is the one every response stream has
// (Stream's: open; grace, once every request it carries was cancelled, so
// that the server's cancels of its own nested requests still reach the
// client; ended, which ends the body once the queue is read). A line
// session reads its server's lines whether or not a stream lingers, so a
// late answer reaches the tracker without one: Events never linger.
type Events struct {
	Stream // its wake is signalled when an event is queued or the stream ends
	// OnAbort, if set, is called once when the client leaves before every
	// request whose answer the stream carries is answered; StopWatch, if
	// set, stops watching the client's connection. Both are set before
	// the stream is shared.
	OnAbort   func()
	StopWatch func()

	qmu sync.Mutex // guards the fields below
	// pending counts the requests of this POST not yet answered.
	pending int
	queue   [][]byte
	queued  int  // bytes in queue
	dropped bool // an event was dropped (logged once)
	buf     []byte
	// out, when the client's connection can hold a write (a
	// joinwrite.Listener's), has each event's write wait for the next one
	// while more are queued: the last goes out with the body's end. It is
	// released before Read waits.
	out *joinwrite.Conn
}

// NewEvents returns a stream for pending requests' answers whose grace
// runs on clk.
func NewEvents(clk clock.Clock, pending int) *Events {
	return &Events{Stream: Stream{Clock: clk, wake: make(chan struct{}, 1)}, pending: pending}
}

// Send implements demux.Route: the message goes as an event. It reports
// false (only for the first event that is dropped) when the backlog was
// full and the event is not an answer.
func (st *Events) Send(line []byte, answer bool) (ok bool) {
	return st.SendEvent(framing.AppendSSEMessage(nil, "", line), answer)
}

// SendEvent queues ev, an event as it goes on the wire; it reports what
// Send does.
func (st *Events) SendEvent(ev []byte, answer bool) (ok bool) {
	st.qmu.Lock()
	defer st.qmu.Unlock()
	if st.Ended() {
		return true
	}
	if !answer && st.queued+len(ev) > Backlog {
		first := !st.dropped
		st.dropped = true
		return !first
	}
	st.queue = append(st.queue, ev)
	st.queued += len(ev)
	st.signal()
	return true
}

// signal wakes the reader.
func (st *Events) signal() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// Settle implements demux.Route: one of its requests is answered.
func (st *Events) Settle() {
	st.qmu.Lock()
	st.pending--
	st.qmu.Unlock()
}

// Cancelled implements demux.Route: with none of its requests left, the
// stream ends after the grace.
func (st *Events) Cancelled(grace time.Duration) {
	st.qmu.Lock()
	st.pending--
	last := st.pending <= 0
	st.qmu.Unlock()
	if last {
		st.EndAfter(grace)
	}
}

// Answered implements demux.Route: the stream ends once every request it
// carries is answered.
func (st *Events) Answered() {
	st.qmu.Lock()
	last := st.pending <= 0
	st.qmu.Unlock()
	if last {
		st.End()
	}
}

// End implements demux.Route: the stream ends once what is queued has
// been read.
func (st *Events) End() { st.CloseWithError(nil) }

// next returns the next queued event, waiting for one; nil once the stream
// is ended and drained.
func (st *Events) next() []byte {
	for {
		st.qmu.Lock()
		if len(st.queue) > 0 {
			ev := st.queue[0]
			st.queue[0] = nil
			st.queue = st.queue[1:]
			st.queued -= len(ev)
			st.qmu.Unlock()
			return ev
		}
		// Seen with the queue, under its lock: a send that queued before
		// the end is read first, and one after it queues nothing.
		ended := st.Ended()
		st.qmu.Unlock()
		if ended {
			return nil
		}
		if st.out != nil {
			st.out.Release()
		}
		<-st.wake
	}
}

// Read hands out the next event, or io.EOF once the stream is closed.
func (st *Events) Read(p []byte) (int, error) {
	if len(st.buf) == 0 {
		if st.buf = st.next(); st.buf == nil {
			return 0, io.EOF
		}
	}
	n := copy(p, st.buf)
	st.buf = st.buf[n:]
	if st.out != nil {
		st.out.HoldNext() // fasthttp writes what Read returns at once
	}
	return n, nil
}

// WriteTo writes each event to w as it comes, one Write per event, until
// the stream is closed and its queue read. fasthttp's server prefers it to
// Read (SupportsBodyWriteTo), which spares a copy buffer per open stream.
func (st *Events) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for ev := st.next(); ev != nil; ev = st.next() {
		if st.out != nil {
			st.out.HoldNext()
		}
		n, err := w.Write(ev)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// SupportsBodyWriteTo tells fasthttp that WriteTo writes what Read would.
func (st *Events) SupportsBodyWriteTo() bool { return true }

// Close is called by fasthttp when the response is done or the client left.
func (st *Events) Close() error {
	if st.StopWatch != nil {
		st.StopWatch()
	}
	st.Abort()
	return nil
}

// Abort ends the stream; if requests of it were still unanswered, the
// client has left, and OnAbort says so, once.
func (st *Events) Abort() {
	st.qmu.Lock()
	fire := st.OnAbort != nil && st.pending > 0
	if fire {
		st.pending = 0
	}
	st.qmu.Unlock()
	st.End()
	if fire {
		st.OnAbort()
	}
}

// Serve answers ctx with body, an event stream whose headers go out at
// once, before its first event: clients wait for them (the go-sdk client
// sends notifications/initialized only once its GET stream has its
// headers).
func Serve(ctx *fasthttp.RequestCtx, body *Events) { serve(ctx, body, nil) }

// ServeDetached is Serve for a long-lived stream (a session's GET
// stream), detached from fasthttp's connection loop where d can.
func ServeDetached(ctx *fasthttp.RequestCtx, body *Events, d *Detached) { serve(ctx, body, d) }

func serve(ctx *fasthttp.RequestCtx, body *Events, d *Detached) {
	body.out, _ = joinwrite.Of(ctx.Conn())
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	if d != nil && d.Serve(ctx, body, body.End) {
		return
	}
	ctx.Response.ImmediateHeaderFlush = true
	ctx.SetBodyStream(body, -1)
}

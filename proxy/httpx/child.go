package httpx

import (
	"io"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/child"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/demux"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/joinwrite"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/lines"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/sessiontable"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// Children serves a stdio MCP server over Streamable HTTP (protocol
// 2025-03-26 to 2025-11-25, with sessions): each session that initialize
// opens gets its own child process, and a stdio.Session between the child
// and the HTTP side, so cancellation works exactly as in the stdio wrapper.
// This side only routes: each POST's messages go to the session as lines,
// and what the session sends back goes to the response stream of the
// request it answers (by id, or by progress token), or to the GET stream.
type Children struct {
	// Argv is the server command. Required, unless Dial is set.
	Argv []string
	// Dial, when set, reaches each session's server in place of starting
	// Argv: an HTTP+SSE upstream (DialSSE).
	Dial func(log *zap.Logger) (Backend, error)
	// Child configures each child's stop ladder and stderr.
	Child child.Options
	// Session configures each session; its OnClientClosed is the sidecar's.
	Session stdio.Options
	// (How many sessions at once, how long one may idle, and the clock are
	// the Sidecar's: MaxSessions, SessionIdle, Clock.)

	sessions sessiontable.Table[*childSession] // set up by the Sidecar's Provision
	mu       sync.Mutex                        // guards shared; held while a session starts
	shared   *childSession                     // serves every sessionless request
	retiring sync.WaitGroup                    // the sessions idle or evicted, stopping
	totals   *proxy.Counters                   // the Sidecar's, set by its Provision (kind)
}

func (cs *Children) provision(idle time.Duration, most int, clk clock.Clock, totals *proxy.Counters) {
	cs.sessions.Init(idle, most, clk)
	cs.totals = totals
}

func (cs *Children) table() table { return &cs.sessions }

// inFlight counts the requests in flight in the sessions, and on the child
// shared by sessionless requests.
func (cs *Children) InFlight() int {
	n := cs.sessions.InFlight()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.shared != nil {
		n += cs.shared.InFlight()
	}
	return n
}

func (cs *Children) clock() clock.Clock { return cs.sessions.Clock() }

// Backend is one session's server as a session of lines talks to it (see
// upstream.Backend): a stdio child, or an HTTP upstream reached as a client.
type Backend = upstream.Backend

// childSession is one session's server and the routes of what it sends
// to the client's HTTP streams (package demux).
type childSession struct {
	*lines.Session
	sessiontable.Usage // when the session last saw a request
	demux.Router[*outStream]
	clock    clock.Clock     // the Children's
	retiring *sync.WaitGroup // the Children's: counts the session while it stops, once retired
}

// start opens a session: the child, the stdio.Session and its router.
func (cs *Children) start(log *zap.Logger) (*childSession, error) {
	copts := cs.Child
	copts.Logger = log
	proc, err := cs.backend(copts)
	if err != nil {
		return nil, err
	}
	c := &childSession{Session: lines.New(proc, cs.Session, copts.TermAfter, cs.totals, log), clock: cs.clock(),
		retiring: &cs.retiring}
	clk := c.clock
	c.New = func(ids []framing.ID) *outStream {
		st := newOutStream(clk, len(ids))
		st.ids = ids
		return st
	}
	c.Start(c.route, nil)
	return c, nil
}

// backend starts a session's server: dials it, or starts the command.
func (cs *Children) backend(copts child.Options) (Backend, error) {
	if cs.Dial != nil {
		return cs.Dial(copts.Logger)
	}
	return upstream.StartChild(cs.Argv, copts)
}

// route delivers what the session sends the client to the HTTP streams.
func (c *childSession) route() {
	var f framing.Frame
	for {
		line, err := c.Out.Next(nil)
		if err != nil {
			c.End()
			return
		}
		var m *framing.Message
		if f.Parse(line) == nil && !f.Batch {
			m = &f.Msgs[0]
		}
		switch c.Deliver(m, line) {
		case demux.NoRoute:
			c.Log.Debug("message for the client dropped: no stream is open", zap.Int("bytes", len(line)))
		case demux.Dropped:
			c.Log.Warn("a client that does not read its stream loses server messages beyond the backlog (answers are kept)",
				zap.Int("backlog_bytes", streamBacklog))
		}
	}
}

// streamBacklog bounds the bytes of notifications and server requests
// queued for a client that does not read its stream; answers to its
// requests are always queued (there are only as many as its requests).
const streamBacklog = 8 << 20

// outStream is one response stream to the client, fed by the router. It is
// the response body: fasthttp's server reads it, and writes and flushes each
// event as a chunk. The router never waits for the client: events queue,
// and only those beyond streamBacklog that are not answers are dropped.
// Its state is the one every response stream has (stream's: open; grace,
// once every request it carries was cancelled, so that the server's
// cancels of its own nested requests still reach the client; ended, which
// ends the body once the queue is read). A line session reads its server's
// lines whether or not a stream lingers, so a late answer reaches the
// tracker without one: an outStream never lingers.
type outStream struct {
	stream              // its wake is signalled when an event is queued or the stream ends
	qmu    sync.Mutex   // guards the fields below
	ids    []framing.ID // the requests whose answers this stream carries
	// pending counts the requests of this POST not yet answered.
	pending int
	queue   [][]byte
	queued  int  // bytes in queue
	dropped bool // an event was dropped (logged once)
	buf     []byte
	// onAbort, if set, is called once when the client leaves before every
	// request of the stream is answered.
	onAbort   func()
	stopWatch func() // stops watching the client's connection, if watched
	// out, when the client's connection can hold a write (Listener), has
	// each event's write wait for the next one while more are queued: the
	// last goes out with the body's end. It is released before Read waits.
	out *joinwrite.Conn
}

// newOutStream returns a stream for pending requests' answers whose grace
// runs on clk.
func newOutStream(clk clock.Clock, pending int) *outStream {
	return &outStream{stream: stream{clock: clk, wake: make(chan struct{}, 1)}, pending: pending}
}

// send queues an event; it reports false (only for the first event that
// is dropped) when the backlog was full and the event is not an answer.
func (st *outStream) send(ev []byte, answer bool) (ok bool) {
	st.qmu.Lock()
	defer st.qmu.Unlock()
	if st.Ended() {
		return true
	}
	if !answer && st.queued+len(ev) > streamBacklog {
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
func (st *outStream) signal() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// Send implements demux.Route: the message goes as an event.
func (st *outStream) Send(line []byte, answer bool) bool {
	return st.send(framing.AppendSSEMessage(nil, "", line), answer)
}

// Settle implements demux.Route: one of its requests is answered.
func (st *outStream) Settle() {
	st.qmu.Lock()
	st.pending--
	st.qmu.Unlock()
}

// Cancelled implements demux.Route: with none of its requests left, the
// stream ends after the grace.
func (st *outStream) Cancelled(grace time.Duration) {
	st.qmu.Lock()
	st.pending--
	last := st.pending <= 0
	st.qmu.Unlock()
	if last {
		st.endAfter(grace)
	}
}

// Answered implements demux.Route: the stream ends once every request it
// carries is answered.
func (st *outStream) Answered() {
	st.qmu.Lock()
	last := st.pending <= 0
	st.qmu.Unlock()
	if last {
		st.End()
	}
}

// End implements demux.Route: the stream ends once what is queued has
// been read.
func (st *outStream) End() { st.stream.end(nil) }

// next returns the next queued event, waiting for one; nil once the stream
// is ended and drained.
func (st *outStream) next() []byte {
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
func (st *outStream) Read(p []byte) (int, error) {
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

// Close is called by fasthttp when the response is done or the client left.
func (st *outStream) Close() error {
	if st.stopWatch != nil {
		st.stopWatch()
	}
	st.abort()
	return nil
}

// abort ends the stream; if requests of it were still unanswered, the
// client has left, and onAbort says so, once.
func (st *outStream) abort() {
	st.qmu.Lock()
	fire := st.onAbort != nil && st.pending > 0
	if fire {
		st.pending = 0
	}
	st.qmu.Unlock()
	st.End()
	if fire {
		st.onAbort()
	}
}

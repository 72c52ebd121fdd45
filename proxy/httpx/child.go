package httpx

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/child"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/joinwrite"
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
// to the client's HTTP streams.
type childSession struct {
	*lineSession
	clock    clock.Clock     // the Children's
	retiring *sync.WaitGroup // the Children's: counts the session while it stops, once retired

	mu sync.Mutex // guards the fields below
	// byID and byToken route answers and progress to their request's stream.
	byID    map[framing.ID]*outStream
	byToken map[framing.ID]*outStream
	get     *outStream   // the standalone GET stream, if one is open
	streams []*outStream // every POST stream, to be closed when the session ends
	last    *outStream   // the newest POST stream still open
	closed  bool         // the session ended: streams get EOF
	initID  framing.ID   // the session's initialize request, once seen
	// listens marks the requests in byID that are subscriptions/listen
	// (2026-07-28): the server ends one with notifications/cancelled, which
	// goes on its stream as its answer would, and ends it.
	listens map[framing.ID]bool
	// shared marks the child that serves every sessionless (2026-07-28)
	// request: there, ids and progress tokens are renamed on the way in, so
	// that clients can never collide, and named back here on the way out.
	shared  bool
	origID  map[framing.ID]framing.ID // renamed id -> the client's
	origTok map[framing.ID]framing.ID // renamed token -> the client's
	renames uint64
}

// start opens a session: the child, the stdio.Session and its router.
func (cs *Children) start(log *zap.Logger) (*childSession, error) {
	copts := cs.Child
	copts.Logger = log
	proc, err := cs.backend(copts)
	if err != nil {
		return nil, err
	}
	c := &childSession{lineSession: newLineSession(proc, cs.Session, copts.TermAfter, cs.totals, log), clock: cs.clock(),
		byID: map[framing.ID]*outStream{}, byToken: map[framing.ID]*outStream{}, retiring: &cs.retiring}
	c.start(c.route, nil)
	return c, nil
}

// backend starts a session's server: dials it, or starts the command.
func (cs *Children) backend(copts child.Options) (Backend, error) {
	if cs.Dial != nil {
		return cs.Dial(copts.Logger)
	}
	return upstream.StartChild(cs.Argv, copts)
}

func newSessionID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// route delivers what the session sends the client to the HTTP streams.
func (c *childSession) route() {
	var f framing.Frame
	for {
		line, err := c.out.Next(nil)
		if err != nil {
			c.end()
			return
		}
		if f.Parse(line) != nil || f.Batch {
			c.deliver(nil, line)
			continue
		}
		c.deliver(&f.Msgs[0], line)
	}
}

// deliver sends one message to the stream it belongs on.
func (c *childSession) deliver(m *framing.Message, line []byte) {
	c.mu.Lock()
	var st *outStream
	answer := m != nil && m.Kind == framing.KindResponse
	switch {
	case m != nil && m.Method == framing.MethodCancelled && c.listens[m.RequestID] && c.byID[m.RequestID] != nil:
		st, line = c.lastOfLocked(m.RequestID, m.RequestIDSpan, line) // the server ended the subscription
		answer = true
	case m != nil && m.Kind == framing.KindResponse && c.byID[m.ID] != nil:
		st, line = c.lastOfLocked(m.ID, m.IDSpan, line)
	case m != nil && m.Method == framing.MethodProgress && c.byToken[m.Token] != nil:
		st = c.byToken[m.Token]
		if orig, ok := c.origTok[m.Token]; ok {
			line = framing.Splice(nil, line, m.TokenSpan, orig)
		}
	case c.shared:
		// 2026-07-28 has no stream for unrelated server traffic, and nothing
		// may go to another client's stream.
	case c.last != nil && !c.last.ended():
		st = c.last // related traffic of the newest call: sampling, logs, nested cancels
	default:
		st = c.get
	}
	c.mu.Unlock()
	if st == nil {
		c.log.Debug("message for the client dropped: no stream is open", zap.Int("bytes", len(line)))
		return
	}
	if !st.send(framing.AppendSSEMessage(nil, "", line), answer) {
		c.log.Warn("a client that does not read its stream loses server messages beyond the backlog (answers are kept)",
			zap.Int("backlog_bytes", streamBacklog))
	}
	if answer {
		st.answered()
	}
}

// lastOfLocked takes the stream of the request id (as the server knows
// it) for the last message of that request, its answer or the server's
// ending of a subscription, and returns it with line under the client's id
// (span is where the id is in line). c.mu is held.
func (c *childSession) lastOfLocked(id framing.ID, span framing.Span, line []byte) (*outStream, []byte) {
	st := c.byID[id]
	delete(c.byID, id)
	delete(c.listens, id)
	if orig, ok := c.origID[id]; ok {
		delete(c.origID, id)
		line = framing.Splice(nil, line, span, orig)
	}
	st.qmu.Lock()
	st.pending--
	st.qmu.Unlock()
	return st, line
}

// end closes every stream once the session is over.
func (c *childSession) end() {
	c.mu.Lock()
	c.closed = true
	streams := append(c.streams, c.get)
	c.streams = nil
	// Requests still waiting for an answer get the proxy's -32000 on their
	// stream, as the relay's do when its upstream's stream breaks: the
	// server is gone (an upstream that closed its event stream, a child
	// that exited), and a stream that just ended would say nothing.
	type owed struct {
		st *outStream
		id framing.ID
	}
	var unanswered []owed
	for id, st := range c.byID {
		unanswered = append(unanswered, owed{st, c.clientIDLocked(id)})
	}
	clear(c.byID)
	c.mu.Unlock()
	for _, o := range unanswered {
		o.st.send(framing.AppendSSEMessage(nil, "", serverGone(o.id)), true)
	}
	for _, st := range streams {
		if st != nil {
			st.end()
		}
	}
}

// clientIDLocked is the client's id of a request the server knows as id
// (renamed when requests share an id). c.mu is held.
func (c *childSession) clientIDLocked(id framing.ID) framing.ID {
	if orig, ok := c.origID[id]; ok {
		return orig
	}
	return id
}

// serverGone is the proxy's answer to a request whose server ended the
// session (or was gone) before answering it.
func serverGone(id framing.ID) []byte {
	return proxy.ErrorReply(id, proxy.CodeServerGone, "the MCP server ended the session before answering")
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
	stream
	ready chan struct{} // signalled when an event is queued or the stream ends
	qmu   sync.Mutex    // guards the fields below
	ids   []framing.ID  // the requests whose answers this stream carries
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
	ready := make(chan struct{}, 1)
	return &outStream{stream: stream{clock: clk, wake: ready}, ready: ready, pending: pending}
}

// send queues an event; it reports false (only for the first event that
// is dropped) when the backlog was full and the event is not an answer.
func (st *outStream) send(ev []byte, answer bool) (ok bool) {
	st.qmu.Lock()
	defer st.qmu.Unlock()
	if st.ended() {
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
	case st.ready <- struct{}{}:
	default:
	}
}

// answered ends the stream once every request it carries is answered.
func (st *outStream) answered() {
	st.qmu.Lock()
	last := st.pending <= 0
	st.qmu.Unlock()
	if last {
		st.end()
	}
}

// end ends the stream once what is queued has been read.
func (st *outStream) end() { st.stream.end(nil) }

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
		st.qmu.Unlock()
		if st.ended() {
			return nil
		}
		if st.out != nil {
			st.out.Release()
		}
		<-st.ready
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
	st.end()
	if fire {
		st.onAbort()
	}
}

// rename gives a request of the shared child an id (and progress token) of
// the proxy's own, remembered for the way back, and returns the line to
// send and the new id.
func (c *childSession) rename(m *framing.Message) ([]byte, framing.ID, framing.ID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.renameLocked(m)
}

// renameLocked is rename with c.mu held.
func (c *childSession) renameLocked(m *framing.Message) ([]byte, framing.ID, framing.ID) {
	if c.origID == nil {
		c.origID, c.origTok = map[framing.ID]framing.ID{}, map[framing.ID]framing.ID{}
	}
	c.renames++
	id := framing.StringID(fmt.Sprintf("h%d", c.renames))
	c.origID[id] = m.ID
	edits := []framing.Edit{{Span: m.IDSpan, To: id}}
	var tok framing.ID
	if m.Token.IsValid() {
		tok = framing.StringID(fmt.Sprintf("ht%d", c.renames))
		c.origTok[tok] = m.Token
		edits = append(edits, framing.Edit{Span: m.TokenSpan, To: tok})
	}
	return framing.Rewrite(nil, m.Raw, edits...), id, tok
}

// renamedOf returns the ids requests in flight under the client's id were
// renamed to (requests that share an id, kept apart).
func (c *childSession) renamedOf(id framing.ID) []framing.ID {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []framing.ID
	for renamed, orig := range c.origID {
		if orig == id && c.byID[renamed] != nil {
			out = append(out, renamed)
		}
	}
	return out
}

// forgetRename drops the renames of a request whose stream is gone.
func (c *childSession) forgetRename(id, tok framing.ID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.origID, id)
	delete(c.byID, id)
	if tok.IsValid() {
		delete(c.origTok, tok)
		delete(c.byToken, tok)
	}
}

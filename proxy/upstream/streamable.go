package upstream

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/mcpheader"
)

// A Streamable HTTP upstream reached as a client reaches it, one session
// of it a Conn (StreamConn): each frame is POSTed, in order, and what
// answers it (JSON, or an event stream, resumed where a 2025 server asks
// for that) is the frame's Stream; the session's GET stream, once
// initialize has named the session, is Listen's. A cancel POSTs its
// notification, or closes its request's stream where that is the cancel
// (2026-07-28, and a session the server gave no id).

// errStreamCancelled ends a request's stream the session no longer wants
// (its request was cancelled).
var errStreamCancelled = errors.New("the request this stream answers was cancelled")

// errConnClosed is Send's and Cancel's error once the Conn is closed.
var errConnClosed = errors.New("the upstream session has ended")

// deleteWait bounds the wait for the answer to the DELETE that ends an
// upstream session.
const deleteWait = 5 * time.Second

// StreamableUpstream dials sessions of a Streamable HTTP server.
type StreamableUpstream struct {
	// Endpoint is the server's MCP endpoint (its URL and the client that
	// reaches it). Required.
	Endpoint
	// MaxBodySize bounds a JSON answer or an event. If zero,
	// framing.DefaultMaxFrameSize.
	MaxBodySize int
	// KeepRevision, when set, sends the requests of a session the upstream
	// opened without a session id (a stateless server) in the client's
	// revision, even when the server speaks 2026-07-28 (see modernize.go);
	// a cancel then may not reach it.
	KeepRevision bool
	// Clock times the wait for the session's GET stream (StreamWait); if
	// nil, the real clock.
	Clock clock.Clock
	// OnUpstreamError, if set, is called for each request the proxy
	// answers in the upstream's place: not reached, or its answer spoiled
	// or lost.
	OnUpstreamError func()

	// What every client of the server learns of it, shared: whether it
	// speaks 2026-07-28 (Modern), and what its 2026-07-28 answers to
	// tools/list said of its tools' mirrored parameters (Mcp-Param-*),
	// which listed says were learned from an answer (a list_changed then
	// makes them stale).
	modern Asked[bool]
	tools  mcpheader.Tools
	listed atomic.Bool
}

// Tools is what the server's 2026-07-28 tools/list answers said of its
// tools' mirrored parameters, shared by every client of it.
func (u *StreamableUpstream) Tools() *mcpheader.Tools { return &u.tools }

// StreamWait bounds how long the frame that follows the answer to
// initialize (the client's notifications/initialized) waits for the
// session's GET stream to have its headers: a server that sends something
// unrelated to a request (a roots/list, a list_changed) as soon as the
// client is initialized finds the stream open, and a server that counts a
// GET after a request's stream ended as its resumption (SEP-1699's
// retry) sees it as such only when it is one. A server that holds the
// GET's headers until it has something to send costs the session this
// much, once.
const StreamWait = TakenInWait

// Dial returns a session's backend of lines (the bridge's, an old
// client's) over a new Conn; nothing is sent until its first line.
func (u *StreamableUpstream) Dial(log *zap.Logger) (Conn, error) {
	return u.Open(log), nil
}

// Open returns a Conn to a new session of the server; nothing is sent
// until its first Send.
func (u *StreamableUpstream) Open(log *zap.Logger) *StreamConn {
	first := NewPosting()
	first.Headed() // no POST before the first
	c := &StreamConn{u: u, log: log, prev: first, stop: make(chan struct{}), initDone: make(chan struct{}),
		calls: make(map[*proxy.Call]*inFlight), unheaded: make(map[*Posting]struct{})}
	c.list = c.lister()
	return c
}

// StreamConn is one session of a Streamable HTTP server, a Conn.
type StreamConn struct {
	u    *StreamableUpstream
	log  *zap.Logger
	list ToolsRead // how it reads tools/list itself

	order sync.Mutex // held by Send and Cancel while they wait their turn
	prev  *Posting   // the previous POST's; under order
	// opening is the session's GET stream's while it has no headers yet
	// (StreamWait): the next frame waits for it. Set before the answer to
	// initialize is handed out; Send clears it.
	opening   atomic.Pointer[Posting]
	listening atomic.Bool   // Listen was called: initialize's answer opens the GET
	initDone  chan struct{} // closed once initialize was answered with a version, or at Close

	mu      sync.Mutex // guards the fields below
	session string
	version string
	// clientInfo is the client's, from its initialize; modern is set when
	// the upstream, stateless, speaks 2026-07-28 too: the session's
	// requests are then sent as 2026-07-28 ones (see Modernize).
	clientInfo  json.RawMessage
	modern      bool
	initialized bool // the first initialize was answered: later ones name no session
	// calls are the requests whose POST has started and whose answer has
	// not ended: where a cancel finds its request's POST and stream.
	calls map[*proxy.Call]*inFlight
	// unheaded are the POSTs whose answers have no headers yet, which
	// Close cuts.
	unheaded map[*Posting]struct{}
	bodies   map[fasthttp.ReadCloserWithError]struct{} // streams being read, closed by Close
	// running counts the POSTs under way; cancelling, the cancels not yet
	// sent: the session's DELETE waits for them.
	running    sync.WaitGroup
	cancelling sync.WaitGroup
	closed     bool

	closeOnce sync.Once
	stop      chan struct{}
}

// inFlight is a request whose answer has not ended, for its cancel.
type inFlight struct {
	posting *Posting                     // its POST's, until the answer's headers come
	body    fasthttp.ReadCloserWithError // its answer's event stream, while read
	cut     bool                         // cancelled by cutting its stream
	// byClose: it went as a 2026-07-28 request, whose cancel is the cut
	// of its stream, and that alone.
	byClose bool
}

// Close ends the upstream session (DELETE, once the cancels sent before
// have gone) and every stream of it, and returns once every goroutine of
// the Conn has ended.
func (c *StreamConn) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		close(c.stop) // under mu: no POST starts after it (see start)
		c.closed = true
		session := c.session
		for body := range c.bodies {
			body.CloseWithError(errSSEStopped)
		}
		c.mu.Unlock()
		select {
		case <-c.initDone:
		default:
			close(c.initDone) // Listen's wait ends
		}
		c.cancelling.Wait() // the session's cancels go before its end
		if session != "" {
			// Bounded: a server may hold its answer until its calls end.
			if resp, err := c.request(Request{Method: fasthttp.MethodDelete, Session: session}, deleteWait); err == nil {
				ReadHead(resp)
			}
		}
		c.cutUnanswered()
		c.running.Wait()
	})
	return nil
}

// cutUnanswered closes the connections of the POSTs whose answers have no
// headers yet, once the Conn closes: nobody will read those answers, and a
// server that sends nothing until it answers, and ignores a cancel, would
// otherwise keep the Conn, and its client's process, waiting for ever.
func (c *StreamConn) cutUnanswered() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p := range c.unheaded {
		p.Cut()
	}
}

// stopped reports whether Close has been called.
func (c *StreamConn) stopped() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

// Send POSTs frame, in order: its POST starts once the one before it has
// been written whole to its connection, however long that connection takes
// to open, and once the session's GET stream, if being opened, has its
// headers. No POST waits for another's answer. It returns the Stream of the
// POST's answer, read by whoever calls Next.
func (c *StreamConn) Send(ctx context.Context, frame []byte, calls []*proxy.Call, h Along) (Stream, error) {
	a := &answer{c: c}
	o := &a.o
	o.msg, o.from, o.ctx = bytes.Clone(frame), h.From, ctx
	if h.Msg != nil {
		o.f.Msgs = append(o.f.Msgs[:0], *h.Msg)
		o.f.Msgs[0].Raw = o.msg
		o.parsed = true
	} else {
		o.parsed = o.f.Parse(o.msg) == nil && !o.f.Batch
	}
	o.isRequest = o.parsed && o.f.Msgs[0].Kind == framing.KindRequest
	if o.isRequest && len(calls) == 1 {
		o.call = calls[0]
	}
	c.order.Lock()
	defer c.order.Unlock()
	if !c.prev.waitWritten(c.stop) || !c.opened() {
		return nil, errConnClosed
	}
	return c.start(a)
}

// opened waits until the session's GET stream, if it is being opened, has
// its headers or StreamWait has passed, or the Conn closes: then it
// reports false.
func (c *StreamConn) opened() bool {
	p := c.opening.Load()
	if p == nil {
		return true
	}
	if !p.waitFor(postingHeaded, c.stop) {
		return false
	}
	c.opening.CompareAndSwap(p, nil)
	return true
}

// outgoing is one frame on its way upstream.
type outgoing struct {
	msg       []byte
	f         framing.Frame
	parsed    bool // one message, JSON-RPC
	isRequest bool // a request
	from      *fasthttp.Request
	ctx       context.Context
	posting   *Posting    // the POST's
	call      *proxy.Call // the request's, if it is one the core tracks
	flight    *inFlight   // the request's: &fl, nil for other frames
	fl        inFlight
}

// start begins POSTing a's frame, unless the Conn has closed; order is
// held.
func (c *StreamConn) start(a *answer) (Stream, error) {
	o := &a.o
	o.posting = NewPosting()
	c.prev = o.posting
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, errConnClosed
	}
	if o.isRequest {
		o.fl = inFlight{posting: o.posting, byClose: c.modern || framing.Revision(cmp.Or(MetaVersion(&o.f.Msgs[0]), c.version)).CancelsByClose()}
		o.flight = &o.fl
		if o.call != nil {
			c.calls[o.call] = o.flight
		}
	}
	c.unheaded[o.posting] = struct{}{}
	c.running.Add(1)
	a.got.Add(1)
	c.mu.Unlock()
	go c.post(a)
	return a, nil
}

// Cancel carries the cancel of call: if its POST waits for a sign-in, it
// is withdrawn and neither is sent; in a session without an id, its
// stream is cut (the whole cancel for a 2026-07-28 request, whose
// notification would be a second one); otherwise the notice is POSTed
// once the request may be cancelled (Posting.BeforeCancel).
func (c *StreamConn) Cancel(call *proxy.Call, notice []byte) error {
	c.order.Lock()
	defer c.order.Unlock()
	if !c.prev.waitWritten(c.stop) {
		return errConnClosed
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errConnClosed
	}
	f := c.calls[call]
	var of *Posting
	if f != nil {
		of = f.posting
		if c.session == "" && c.cutLocked(f) {
			c.mu.Unlock()
			return nil // the cut was the cancel
		}
	}
	c.running.Add(1)
	c.cancelling.Add(1)
	c.mu.Unlock()
	go c.postCancel(bytes.Clone(notice), of)
	return nil
}

// cutLocked cancels the request f by cutting its answer's stream: now if
// it is being read, else once its headers come (track). It reports
// whether the cut is the whole cancel (a 2026-07-28 request's).
func (c *StreamConn) cutLocked(f *inFlight) bool {
	f.cut = true
	if f.body != nil {
		f.body.CloseWithError(errStreamCancelled)
	} else if f.byClose {
		f.posting.Cut() // no headers yet: its connection is the stream
	}
	return f.byClose
}

// postCancel POSTs a cancel's notice, once its request (of, if its
// answer has no headers yet) may be cancelled.
func (c *StreamConn) postCancel(notice []byte, of *Posting) {
	defer c.running.Done()
	defer c.cancelling.Done()
	var f framing.Frame
	if f.Parse(notice) != nil || f.Batch {
		return
	}
	if of.Withdraw() { // its request waited for a sign-in: it is never sent, nor is this
		c.log.Debug("a request waiting for a sign-in was cancelled: withdrawn", zap.Stringer("id", f.Msgs[0].RequestID))
		return
	}
	of.BeforeCancel(nil, c.stop) // at the session's end, at once: before its DELETE
	c.mu.Lock()
	session := c.session
	c.mu.Unlock()
	resp, err := c.request(Request{Body: notice, Session: session, Msg: &f.Msgs[0], Tools: &c.u.tools}, 0)
	if err == nil {
		ReadHead(resp) // a notification's answer: 202, or a refusal nobody waits for
	}
}

// forget forgets the request o carried, its answer over.
func (c *StreamConn) forget(o *outgoing) {
	if o.call == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls[o.call] == o.flight {
		delete(c.calls, o.call)
	}
}

// wasCut reports whether the request o carried was cancelled by cutting
// its stream (the read then fails with the connection's error, not ours).
func (c *StreamConn) wasCut(o *outgoing) bool {
	if o.flight == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return o.flight.cut
}

// post sends one frame, and hands what answers it to its Stream.
func (c *StreamConn) post(a *answer) {
	defer c.running.Done()
	defer a.got.Done()
	o := &a.o
	f, msg := &o.f, o.msg
	initialize := o.isRequest && f.Msgs[0].Method == framing.MethodInitialize
	c.mu.Lock()
	session := c.session
	if initialize {
		c.clientInfo = clientInfoOf(&f.Msgs[0])
	}
	if o.isRequest && c.modern && Modernizable(f.Msgs[0].Method) {
		if modern, err := Modernize(&f.Msgs[0], c.clientInfo); err == nil && f.Parse(modern) == nil {
			msg = modern
		}
	}
	r := Request{Body: msg, Posting: o.posting, Session: session, Version: c.version, Tools: &c.u.tools, From: o.from}
	c.mu.Unlock()
	var m *framing.Message
	if o.parsed {
		m = &f.Msgs[0]
		r.Msg = m
	}
	c.u.BeforeCall(&r, c.list)
	if o.ctx != nil && o.ctx.Done() != nil { // its end gives up the wait for the headers
		defer context.AfterFunc(o.ctx, func() { o.posting.Cut() })()
	}
	resp, err := c.u.Do(r, 0)
	c.headed(o.posting)
	if err == nil {
		resp, err = c.u.AfterCall(r, resp, c.list)
	}
	if errors.Is(err, ErrWithdrawn) { // cancelled while it waited for a sign-in: the client has its cancel's answer
		return
	}
	if err == nil && resp.StatusCode() == fasthttp.StatusAccepted {
		ReadHead(resp)
		return
	}
	if reply, refused := postRefused(resp, err, c.log, c.u.OnUpstreamError); refused {
		if o.isRequest && !(err != nil && c.wasCut(o)) {
			a.reply(reply)
		}
		return
	}
	if initialize {
		c.noteInitialized(resp)
	}
	if a.closed.Load() { // nobody is to read it
		resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
		return
	}
	a.resp = resp
	if o.isRequest {
		a.of = c.answering(m)
	}
}

// headed notes that a POST has its answer's headers, or failed.
func (c *StreamConn) headed(p *Posting) {
	p.Headed()
	c.mu.Lock()
	delete(c.unheaded, p)
	c.mu.Unlock()
}

// answering is what a request's answer tells the Conn.
type answering uint8

const (
	answersOther      answering = iota
	answersInitialize           // the protocol version, and the session's GET stream
	answersToolsList            // in 2026-07-28, the tools' mirrored parameters
)

// answering returns what the answer to a request m tells the Conn.
func (c *StreamConn) answering(m *framing.Message) answering {
	switch m.Method {
	case framing.MethodInitialize:
		return answersInitialize
	case "tools/list":
		c.mu.Lock()
		version := cmp.Or(MetaVersion(m), c.version)
		c.mu.Unlock()
		if framing.Revision(version).CancelsByClose() {
			return answersToolsList
		}
	}
	return answersOther
}

// noteInitialized takes the session the upstream's answer to the first
// initialize gives; without one (a stateless upstream), it asks, before the
// client has its answer and so before its next request, whether the
// upstream speaks 2026-07-28.
func (c *StreamConn) noteInitialized(resp *fasthttp.Response) {
	c.mu.Lock()
	first := !c.initialized
	if first {
		c.initialized = true
		c.session = strings.Clone(string(Peek(resp.Header.All(), SessionHeader)))
	}
	stateless := first && c.session == "" && !c.u.KeepRevision
	c.mu.Unlock()
	if stateless {
		c.probeModern()
	}
}

// learn is what the Conn learns from one message of the server's, which
// it returns as the client is to see it: an initialize result names the
// protocol version, and opens the session's GET stream; a 2026-07-28
// tools/list result names the tools' mirrored parameters, and loses the
// tools whose annotations are invalid, which a client must leave out.
func (c *StreamConn) learn(data []byte, of answering) []byte {
	c.u.Heard(data)
	switch of {
	case answersToolsList:
		return c.u.LearnTools(data, c.log)
	case answersInitialize:
		var r struct {
			Result struct {
				ProtocolVersion string `json:"protocolVersion"`
			} `json:"result"`
		}
		if json.Unmarshal(data, &r) == nil && r.Result.ProtocolVersion != "" {
			c.mu.Lock()
			c.version = r.Result.ProtocolVersion
			c.mu.Unlock()
			c.initialize()
		}
	}
	return data
}

// initialize notes that initialize was answered: the session's GET
// stream, if Listen waits for it, is opened before the client's next
// frame goes.
func (c *StreamConn) initialize() {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.initDone:
		return // a second initialize: the stream is open, or not to be
	default:
	}
	if c.listening.Load() && !c.closed {
		c.opening.Store(NewPosting())
	}
	close(c.initDone)
}

// track notes the event stream body is being read (the answer to f, if
// not nil), for Close and for a cancel to cut; it fails, body closed, when
// the Conn has closed or the request was cancelled before its headers
// came.
func (c *StreamConn) track(body fasthttp.ReadCloserWithError, f *inFlight) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		body.CloseWithError(errSSEStopped)
		return errSSEStopped
	}
	if f != nil {
		if f.cut {
			body.CloseWithError(errStreamCancelled)
			return errStreamCancelled
		}
		f.body = body
	}
	if c.bodies == nil {
		c.bodies = map[fasthttp.ReadCloserWithError]struct{}{}
	}
	c.bodies[body] = struct{}{}
	return nil
}

func (c *StreamConn) untrack(body fasthttp.ReadCloserWithError, f *inFlight) {
	c.mu.Lock()
	delete(c.bodies, body)
	if f != nil && f.body == body {
		f.body = nil
	}
	c.mu.Unlock()
	body.CloseWithError(nil)
}

// request sends one request of the session's (see Endpoint.Do), in the
// session's protocol revision.
func (c *StreamConn) request(r Request, timeout time.Duration) (*fasthttp.Response, error) {
	c.mu.Lock()
	r.Version = c.version
	c.mu.Unlock()
	return c.u.Do(r, timeout)
}

// limit bounds a JSON answer or an event.
func (c *StreamConn) limit() int { return cmp.Or(c.u.MaxBodySize, framing.DefaultMaxFrameSize) }

// postRefused reports whether a POST to the upstream failed (err, resp
// then nil or released) or was refused (HTTP 300 or more); then it has
// released resp, and reply makes the proxy's answer for the request the
// POST carried: for a 401, what the server asked for and how to give it;
// for a failure, the loss (PostLoss), logged and counted (count) as reply
// makes it. Otherwise resp is the caller's.
func postRefused(resp *fasthttp.Response, err error, log *zap.Logger, count func()) (reply func(framing.ID) []byte, refused bool) {
	var why string
	switch ae, signIn := errors.AsType[*AuthError](err); {
	case signIn:
		why = ae.Error() + "; the bridge's log says more (mcp-cancel-proxy auth logout URL forgets a sign-in that no longer works)"
	case err != nil:
		loss, why := PostLoss(err)
		return func(id framing.ID) []byte {
			Lost(log, count, id, loss, why)
			return proxy.LossReply(id, loss, why)
		}, true
	case resp.StatusCode() == fasthttp.StatusUnauthorized:
		challenge := string(Peek(resp.Header.All(), "WWW-Authenticate"))
		ReadHead(resp)
		log.Warn("the upstream wants authorization", zap.String("www_authenticate", challenge[:min(len(challenge), 200)]))
		return func(id framing.ID) []byte { return unauthorized(id, challenge) }, true
	case resp.StatusCode() >= 300:
		status := resp.StatusCode()
		return refusal(status, ReadHead(resp), log), true
	default:
		return nil, false
	}
	log.Warn("posting to the upstream failed", zap.String("why", why))
	return func(id framing.ID) []byte { return proxy.ErrorReply(id, framing.CodeInternalError, why) }, true
}

// refusal returns the answer to a request the upstream refused with an
// error status and the body head: the server's own error, as it wrote it,
// where it is a JSON-RPC one, else the proxy's naming the status.
func refusal(status int, head []byte, log *zap.Logger) func(framing.ID) []byte {
	if reply := serverError(head); reply != nil {
		log.Debug("the upstream answered the message with an error status", zap.Int("status", status))
		return reply
	}
	why := fmt.Sprintf("the upstream refused the message: HTTP %d %s", status, bytes.TrimSpace(head[:min(len(head), 200)]))
	log.Warn("posting to the upstream failed", zap.String("why", why))
	return func(id framing.ID) []byte { return proxy.ErrorReply(id, framing.CodeInternalError, why) }
}

// serverError returns, when body is a JSON-RPC error response (a stateless
// 2026-07-28 server answers an unknown method or bad params with one, under
// an HTTP error status), the answer it makes for a request id: the
// server's error object as it wrote it (code, message, data), under the
// request's id (the server's may be null). Otherwise nil: the status is
// the proxy's to explain.
func serverError(body []byte) func(framing.ID) []byte {
	var m struct {
		JSONRPC string          `json:"jsonrpc"`
		Error   json.RawMessage `json:"error"`
	}
	var e struct {
		Code    *int    `json:"code"`
		Message *string `json:"message"`
	}
	if json.Unmarshal(body, &m) != nil || m.JSONRPC != "2.0" || json.Unmarshal(m.Error, &e) != nil || e.Code == nil || e.Message == nil {
		return nil
	}
	var compact bytes.Buffer
	if json.Compact(&compact, m.Error) != nil {
		return nil
	}
	return func(id framing.ID) []byte {
		out := append([]byte(`{"jsonrpc":"2.0","id":`), id.AppendJSON(nil)...)
		out = append(append(out, `,"error":`...), compact.Bytes()...)
		return append(out, '}')
	}
}

// KindUnauthorized is data.kind of the proxy's error for a request the
// upstream refused for want of authorization (HTTP 401): apart from a
// deadline's, so that a client can tell the user what to do.
const KindUnauthorized = "unauthorized"

// unauthorized is the proxy's answer to a request the upstream refused
// with 401: what the server asked for, and how to give it.
func unauthorized(id framing.ID, challenge string) []byte {
	return proxy.ErrorReplyKind(id, framing.CodeInternalError, wantsAuthorization(challenge), KindUnauthorized)
}

// wantsAuthorization says that the upstream answered 401 with challenge
// (its WWW-Authenticate), and how to give the proxy what it wants.
func wantsAuthorization(challenge string) string {
	msg := "the MCP server wants authorization (HTTP 401"
	if challenge != "" {
		msg += ", WWW-Authenticate: " + challenge[:min(len(challenge), 200)]
	}
	return msg + "): give it to the proxy with --header 'Authorization: Bearer ${TOKEN}' (the token from the environment) or --header-file FILE"
}

// answers reports whether data is the answer to the request id: a scan of
// its top level for the id, not a second parse (the session parses it).
func answers(data []byte, id framing.ID) bool {
	if d := bytes.TrimSpace(data); len(d) > 0 && d[0] == '[' { // a batch (2025-03-26): rare, parsed
		var f framing.Frame
		return f.Parse(d) == nil && slices.ContainsFunc(f.Msgs, func(m framing.Message) bool {
			return m.Kind == framing.KindResponse && m.ID == id
		})
	}
	got, isResponse, ok := framing.PeekID(data)
	return ok && isResponse && got == id
}

// MirrorHeaders sets the headers a 2026-07-28 server requires to match the
// body: Mcp-Method, Mcp-Name (the tool, prompt or resource named, or the
// task of a tasks/* request; in the Base64 sentinel form where it is not
// plain header text), and the protocol version the message's _meta names,
// which replaces *version.
func MirrorHeaders(req *fasthttp.Request, m *framing.Message, version *string) {
	if m.Method == "" {
		return
	}
	req.Header.Set("Mcp-Method", m.Method)
	if name, ok := MirroredName(m); ok {
		req.Header.Set("Mcp-Name", mcpheader.Encode(name))
	}
	if v := MetaVersion(m); v != "" {
		*version = v
	}
}

// MirroredName returns the value Mcp-Name mirrors for a request, before
// encoding: the tool or prompt named, the resource read, or the task of a
// tasks/* request (the tasks extension routes by it); ok is false for a
// method without one.
func MirroredName(m *framing.Message) (name string, ok bool) {
	var p struct {
		URI    string `json:"uri"`
		TaskID string `json:"taskId"`
	}
	params := func() bool {
		return m.ParamsSpan.Found() && json.Unmarshal(m.Raw[m.ParamsSpan.Start:m.ParamsSpan.End], &p) == nil
	}
	switch m.Method {
	case "tools/call", "prompts/get":
		return m.Name(), true
	case "resources/read":
		return p.URI, params()
	case "tasks/get", "tasks/update", "tasks/cancel", "tasks/result":
		return p.TaskID, params() && p.TaskID != ""
	}
	return "", false
}

// MetaVersion returns the protocol version a message's params._meta names
// (2026-07-28's io.modelcontextprotocol/protocolVersion), or "".
func MetaVersion(m *framing.Message) string {
	meta := m.MetaSpan
	if !meta.Found() || !bytes.Contains(m.Raw[meta.Start:meta.End], []byte("protocolVersion")) {
		return ""
	}
	var v struct {
		Version string `json:"io.modelcontextprotocol/protocolVersion"`
	}
	if json.Unmarshal(m.Raw[meta.Start:meta.End], &v) != nil {
		return ""
	}
	return v.Version
}

package httpx

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/stream"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// errGaveUp is a POST whose answer the sidecar stopped waiting for: the
// request was cancelled, or its deadline passed, before the upstream's
// headers came.
var errGaveUp = errors.New("the request was ended before the upstream answered")

// hold is a request the governor keeps in the sidecar (max_concurrent)
// until it dispatches it, or the request is cancelled while waiting.
type hold struct {
	ch        chan struct{} // closed when the wait is over
	withdrawn bool          // cancelled while waiting: never sent
	reply     []byte        // for the client, when its deadline passed while waiting
	// A held re-issue that joined a running call (reissue: join) is told
	// of the call's progress (Notify): until its POST answers with an
	// event stream, notes keeps it and noted is closed; then joined is
	// the stream. All are guarded by the session core's lock.
	notes  [][]byte
	noted  chan struct{}
	joined *joinedStream
}

// newHold is the hold of a request the governor keeps waiting.
func newHold(*proxy.Call) any { return &hold{ch: make(chan struct{}), noted: make(chan struct{})} }

// The session is its core's proxy.Carrier: what the core decides with no
// POST in hand (a deadline, a dispatch, the proxy's own request) is
// carried out here, the core's lock held; anything that waits for the
// upstream runs on a goroutine of its own.

// Dispatch implements proxy.Carrier: the POST waiting for its held request
// sends it now.
func (sess *session) Dispatch(c *proxy.Call, held any) {
	h := held.(*hold)
	if h.joined != nil { // its POST answers already: the request goes from here
		sess.late.Store(true)
		sess.sc.bg.Go(func() { outbound{sess.sc}.forwardJoined(sess, c, h.joined) })
	}
	close(h.ch)
}

// Withdrawn implements proxy.Carrier: the POST waiting for its held request
// sends it never; reply, if not nil, is the client's answer on its stream.
func (sess *session) Withdrawn(_ *proxy.Call, held any, reply []byte) {
	h := held.(*hold)
	h.withdrawn, h.reply = true, reply
	if h.joined != nil {
		h.joined.end(sess, reply)
	}
	close(h.ch)
}

// Cancel implements proxy.Carrier: the client's stream for c ends with
// reply (if not nil), and the upstream is told, where a notification can
// find the request (a session, and not 2026-07-28, where closing the
// stream was the cancel).
func (sess *session) Cancel(c *proxy.Call, notice, reply []byte) {
	p := sess.postingOf(c)
	if st := sess.takeDeferred(c); st != nil { // the governor sends the cancel it kept
		if sess.protocolVersion().CancelsByClose() {
			st.post().Cut()                  // before the upstream's headers, its connection
			st.CloseWithError(errClientGone) // the client's close, carried out: the cancel
			return
		}
		st.StopKeeping()
		p = st.post()
	}
	if reply != nil {
		sess.finishCall(c, reply)
	}
	if sess.sessionID() != "" && !sess.protocolVersion().CancelsByClose() {
		outbound{sess.sc}.goNotify(sess, notice, []*upstream.Posting{p}, c)
	}
}

// Notify implements proxy.Carrier: the only request the core notifies of
// is one held, a re-issue that joined a running call, told of that call's
// progress. It goes on the event stream its POST answers with; the first
// has the POST open that stream (waitHeld).
func (sess *session) Notify(_ *proxy.Call, held any, frame []byte) {
	h, ok := held.(*hold)
	switch {
	case !ok:
	case h.joined != nil:
		h.joined.ev.Send(frame, false)
	default:
		if h.notes == nil {
			close(h.noted)
		}
		h.notes = append(h.notes, bytes.Clone(frame))
	}
}

// ownPost is a request of the proxy's own on its way: how far its POST
// has gone, and the stream of its answer, which the cancel of it closes
// where closing is the cancel (2026-07-28).
type ownPost struct {
	posting *upstream.Posting
	st      *stream.Stream
}

// CancelOwn implements proxy.Carrier: the cancel of the proxy's own
// request (a hosted task's call) is POSTed in the session, where a
// notification can find it, once the request's own POST has gone; in
// 2026-07-28 its answer's stream is closed, which is the cancel.
func (sess *session) CancelOwn(c *proxy.Call, notice []byte) {
	sess.mu.Lock()
	p := sess.own[c]
	delete(sess.own, c)
	sess.mu.Unlock()
	switch {
	case p == nil:
	case sess.protocolVersion().CancelsByClose():
		if p.posting.Cut() && p.posting.Unsent() { // not a byte of it went: the server never saw it
			sess.t.WithdrawOwn(c)
		}
		p.st.CloseWithError(stream.ErrCancelled) // past its headers, the stream's close is the cancel
	case sess.sessionID() != "":
		outbound{sess.sc}.goNotify(sess, notice, []*upstream.Posting{p.posting}, c)
	}
}

// SendOwn implements proxy.Carrier: the proxy's own request (tasks/cancel,
// a hosted task's call) is POSTed in the session, and its answer given to
// the tracker.
func (sess *session) SendOwn(c *proxy.Call, frame []byte) {
	p := &ownPost{posting: upstream.NewPosting(), st: stream.New(sess.sc.clock)}
	sess.mu.Lock()
	if sess.own == nil {
		sess.own = map[*proxy.Call]*ownPost{}
	}
	sess.own[c] = p
	sess.mu.Unlock()
	sess.sc.bg.Go(func() {
		outbound{sess.sc}.postOwn(sess, c, frame, p)
		sess.mu.Lock()
		delete(sess.own, c)
		sess.mu.Unlock()
	})
}

// endOwn closes the answers' streams of the proxy's own requests still
// running: in 2026-07-28, the cancel of each, as the session ends.
func (sess *session) endOwn() {
	sess.mu.Lock()
	own := sess.own
	sess.own = nil
	sess.mu.Unlock()
	for _, p := range own {
		p.st.CloseWithError(stream.ErrCancelled)
	}
}

// postOwn POSTs a request of the proxy's own upstream (its posting p) and
// puts the answer (JSON or an event stream) to the session's tracker,
// unless its stream is closed first.
func (ob outbound) postOwn(sess *session, c *proxy.Call, frame []byte, p *ownPost) {
	r := upstream.Request{Body: frame, Session: sess.sessionID(), Version: string(sess.protocolVersion()), Posting: p.posting}
	var f framing.Frame
	if sess.protocolVersion().CancelsByClose() && f.Parse(frame) == nil && !f.Batch { // a 2026-07-28 upstream matches headers to the body
		r.Msg = &f.Msgs[0]
	}
	resp, err := ob.s.up.Do(r, 0)
	p.posting.Headed() // its answer's headers have come, or it failed: a cancel of it may go
	if err != nil && p.posting.WasCut() {
		return // cancelled before the server answered: its connection closed, as a cancel of 2026-07-28 is
	}
	if err != nil {
		ob.s.log.Warn("the proxy's own request failed", zap.String("session", sess.scope), zap.String("error", upstream.Brief(err)))
		ob.failOwn(sess, frame, "the upstream MCP server is unreachable: "+upstream.Brief(err))
		return
	}
	if ct := resp.Header.ContentType(); resp.StatusCode() >= 300 && !upstream.IsEventStream(ct) && !bytes.Contains(ct, []byte("json")) {
		status := resp.StatusCode()
		upstream.ReadHead(resp) // and releases it
		ob.failOwn(sess, frame, fmt.Sprintf("the upstream MCP server failed with HTTP %d", status))
		return
	}
	defer fasthttp.ReleaseResponse(resp)
	if !p.st.SetBody(upstream.BodyOf(resp)) { // cancelled meanwhile
		return
	}
	ob.readOwn(sess, c, resp)
	p.st.CloseWithError(nil)
}

// failOwn answers frame, a request of the proxy's own that failed on its
// way, for the server that could not: with an error of the proxy's own,
// which the tracker gives to the request's owner (a hosted task fails).
func (ob outbound) failOwn(sess *session, frame []byte, why string) {
	var f framing.Frame
	if f.Parse(frame) != nil || f.Batch || f.Msgs[0].Kind != framing.KindRequest {
		return
	}
	reply := proxy.ErrorReply(f.Msgs[0].ID, proxy.CodeServerGone, why)
	if f.Parse(reply) == nil {
		relay{ob.s}.decideFrame(sess, proxy.Server, &f, proxy.TraceContext{})
	}
}

// readOwn reads the answer to c, a request of the proxy's own, JSON or an
// event stream, putting each message to the session's tracker; what the
// tracker leaves for the client (a hosted task's progress, its server's
// requests), which no stream of the client's carries, goes to the
// governor (proxy.OwnMessages).
func (ob outbound) readOwn(sess *session, c *proxy.Call, resp *fasthttp.Response) {
	g, _ := sess.core.Governor().(proxy.OwnMessages)
	rl := relay{ob.s}
	var f framing.Frame
	take := func(data []byte) {
		if err := f.Parse(data); err != nil {
			sess.t.Invalid(proxy.Server, err, data)
			return
		}
		if left := rl.decideFrame(sess, proxy.Server, &f, proxy.TraceContext{}).Data; g != nil && len(left) > 0 {
			g.FromOwn(c, bytes.Clone(left))
		}
	}
	if !upstream.IsEventStream(resp.Header.ContentType()) {
		take(readBody(resp, ob.s.maxBody))
		return
	}
	ob.eachEvent(resp, func(ev *framing.Event) {
		if ev.HasData && len(ev.Data) > 0 {
			take(ev.Data)
		}
	})
}

// readBody reads a streamed response's body, up to max bytes.
func readBody(resp *fasthttp.Response, max int) []byte {
	bs := resp.BodyStream()
	if bs == nil {
		return resp.Body()
	}
	body, _ := upstream.ReadAll(bs, resp.Header.ContentLength(), max)
	resp.CloseBodyStream()
	return body[:min(len(body), max)]
}

// closeGovernor ends the session's governance, once.
func (sess *session) closeGovernor() {
	gov := sess.core.Governor()
	if gov == nil {
		return
	}
	sess.govOnce.Do(func() {
		if g, ok := gov.(closerSoon); ok {
			sess.govDone.Store(g.CloseSoon())
			return
		}
		sess.sc.bg.Go(gov.Close) // Cleanup waits for it
	})
}

// closerSoon is a governor that can end without making its closer wait
// (package policy's): most sessions, a request's own, have nothing to
// settle, and then no goroutine is started. Another governor's Close runs
// on a goroutine of the sidecar's bg group. CloseSoon reports whether the
// governance ended with nothing left to do.
type closerSoon interface{ CloseSoon() bool }

// heldClientGone withdraws the requests of a POST still waiting in the
// sidecar whose client closed the stream (protocol 2026-07-28): they are
// cancelled before dispatch and never sent.
func (rl relay) heldClientGone(sess *session, d *decided) {
	for _, hc := range d.Held {
		sess.core.Cancel(hc.Call, proxy.SourceDisconnect, "client closed the stream", nil)
	}
}

// watchHeld watches the client's connection while d's requests are held,
// until the returned stop. In 2026-07-28 closing the stream is the
// cancel: one closed while its requests wait cancels them before
// dispatch. In 2025 it is no cancel, but a request the proxy would answer
// itself (a tasks/result poll: proxy.Session.Left) is freed, since nothing
// runs for it upstream and nobody would read its answer.
func (rl relay) watchHeld(ctx *fasthttp.RequestCtx, sess *session, d *decided, byClose bool) (stop func()) {
	gone := func() { rl.heldClientGone(sess, d) }
	if !byClose {
		gone = func() {
			for _, hc := range d.Held {
				sess.core.Left(hc.Call)
			}
		}
	}
	return rl.s.closes.Watch(ctx.Conn(), gone)
}

// waitHeld waits until every held request of a POST is dispatched or
// withdrawn, and returns the frame to forward without the withdrawn ones,
// and their deadline replies; data is nil when nothing is left to send.
func (rl relay) waitHeld(ctx *fasthttp.RequestCtx, sess *session, d *decided) (data []byte, replies [][]byte) {
	defer rl.watchHeld(ctx, sess, d, sess.protocolVersion().CancelsByClose())()
	withdrawn := map[*proxy.Call]bool{}
	for _, hc := range d.Held {
		h := hc.Handle.(*hold)
		<-h.ch
		if h.withdrawn {
			withdrawn[hc.Call] = true
			if h.reply != nil {
				replies = append(replies, h.reply)
			}
		}
	}
	if len(withdrawn) == 0 {
		return d.Data, nil
	}
	return d.Rebuild(withdrawn), replies
}

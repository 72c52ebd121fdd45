package httpx

import (
	"errors"
	"io"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
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
}

// actions is a session's proxy.Actions, for its governor.
type actions struct {
	s    *Sidecar
	sess *session
}

// Expire implements proxy.Actions: the request is cancelled upstream, and
// the client's stream ends with the proxy's timeout error.
func (a actions) Expire(c *proxy.Call, reason string, reply []byte) {
	sess := a.sess
	sess.decideMu.Lock()
	defer sess.decideMu.Unlock()
	cancel := sess.t.CancelCall(c, proxy.SourceDeadline, reason)
	if cancel == nil {
		return // answered or cancelled meanwhile
	}
	if h := sess.takeHold(c); h != nil {
		sess.t.Withdraw(proxy.Client, c)
		h.withdrawn, h.reply = true, reply
		close(h.ch)
		return
	}
	sess.finishCall(c, reply)
	if sess.sessionID() != "" && !sess.protocolVersion().CancelsByClose() {
		go a.s.notify(sess, cancel, c) // in 2026-07-28 closing the stream was the cancel
	}
}

// Dispatch implements proxy.Actions: a held request goes upstream now.
func (a actions) Dispatch(c *proxy.Call) {
	if h := a.sess.takeHold(c); h != nil {
		close(h.ch)
	}
}

// SendOwn implements proxy.Actions: the proxy's own request (tasks/cancel)
// is POSTed in the session, and its answer given to the tracker, which
// hands it to onAnswer.
func (a actions) SendOwn(method string, params []byte, onAnswer func(*framing.Message)) {
	frame := a.sess.t.OwnRequest(method, params, onAnswer)
	go a.s.postOwn(a.sess, frame)
}

// Restart implements proxy.Actions: an HTTP upstream is not the sidecar's
// to restart.
func (a actions) Restart(string) bool { return false }

// After implements proxy.Actions: f runs once the POST being decided, if
// any, has had its cancels applied (held requests withdrawn).
func (a actions) After(f func()) {
	a.sess.decideMu.Lock()
	defer a.sess.decideMu.Unlock()
	f()
}

// postOwn POSTs a request of the proxy's own upstream and puts the answer
// (JSON or an event stream) to the session's tracker.
func (s *Sidecar) postOwn(sess *session, frame []byte) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI(s.upstream.String())
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if id := sess.sessionID(); id != "" {
		req.Header.Set(sessionHeader, id)
	}
	if v := sess.protocolVersion(); v != "" {
		req.Header.Set(versionHeader, string(v))
		var f framing.Frame
		if v.CancelsByClose() && f.Parse(frame) == nil && !f.Batch { // a 2026-07-28 upstream matches headers to the body
			version := string(v)
			mirrorHeaders(req, &f.Msgs[0], &version)
		}
	}
	req.SetBody(frame)
	if err := s.client.Do(req, resp); err != nil {
		s.log.Warn("the proxy's own request failed", zap.String("session", sess.scope), zap.String("error", brief(err)))
		fasthttp.ReleaseResponse(resp)
		return
	}
	s.toTracker(sess, resp)
}

// readBody reads a streamed response's body, up to max bytes.
func readBody(resp *fasthttp.Response, max int) []byte {
	bs := resp.BodyStream()
	if bs == nil {
		return resp.Body()
	}
	body, _ := io.ReadAll(io.LimitReader(bs, int64(max)))
	resp.CloseBodyStream()
	return body
}

// holdLocked registers a held request; sess.mu is held.
func (sess *session) holdLocked(c *proxy.Call) *hold {
	if sess.holds == nil {
		sess.holds = map[*proxy.Call]*hold{}
	}
	h := &hold{ch: make(chan struct{})}
	sess.holds[c] = h
	return h
}

// takeHold removes and returns c's hold, nil if it has none.
func (sess *session) takeHold(c *proxy.Call) *hold {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	h := sess.holds[c]
	delete(sess.holds, c)
	return h
}

// withdrawIfHeld withdraws a held request its client cancelled: it was
// never sent, and neither is its cancel. It reports whether c was held.
func (sess *session) withdrawIfHeld(c *proxy.Call) bool {
	h := sess.takeHold(c)
	if h == nil {
		return false
	}
	sess.t.Withdraw(proxy.Client, c)
	h.withdrawn = true
	close(h.ch)
	return true
}

// closeGovernor ends the session's governance, once.
func (sess *session) closeGovernor() {
	if sess.gov == nil {
		return
	}
	sess.govOnce.Do(func() {
		if g, ok := sess.gov.(closerSoon); ok {
			g.CloseSoon()
			return
		}
		go sess.gov.Close()
	})
}

// closerSoon is a governor that can end without making its closer wait
// (package policy's): most sessions, a request's own, have nothing to
// settle, and then no goroutine is started.
type closerSoon interface{ CloseSoon() }

// heldClientGone withdraws the requests of a POST still waiting in the
// sidecar whose client closed the stream (protocol 2026-07-28): they are
// cancelled before dispatch and never sent.
func (s *Sidecar) heldClientGone(sess *session, d *decided) {
	sess.decideMu.Lock()
	defer sess.decideMu.Unlock()
	for _, hc := range d.held {
		if sess.t.CancelCall(hc.c, proxy.SourceDisconnect, "client closed the stream") != nil {
			sess.withdrawIfHeld(hc.c)
		}
	}
}

// waitHeld waits until every held request of a POST is dispatched or
// withdrawn, and returns the frame to forward without the withdrawn ones,
// and their deadline replies; data is nil when nothing is left to send.
func (s *Sidecar) waitHeld(ctx *fasthttp.RequestCtx, sess *session, d *decided) (data []byte, replies [][]byte) {
	if sess.protocolVersion().CancelsByClose() {
		// Closing the stream is the cancel: one closed while its requests
		// wait cancels them before dispatch.
		stop := watchClose(ctx.Conn(), func() { s.heldClientGone(sess, d) })
		defer stop()
	}
	withdrawn := map[*proxy.Call]bool{}
	for _, hc := range d.held {
		<-hc.h.ch
		if hc.h.withdrawn {
			withdrawn[hc.c] = true
			if hc.h.reply != nil {
				replies = append(replies, hc.h.reply)
			}
		}
	}
	if len(withdrawn) == 0 {
		return d.data, nil
	}
	var kept [][]byte
	var requests []*proxy.Call
	for i, raw := range d.kept {
		if c := d.keptCalls[i]; c == nil || !withdrawn[c] {
			kept = append(kept, raw)
		}
	}
	for _, c := range d.requests {
		if !withdrawn[c] {
			requests = append(requests, c)
		}
	}
	d.requests = requests
	return joinFrame(kept, d.batch), replies
}

package httpx

import (
	"bytes"
	"errors"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// sessionFor returns the session a request belongs to, and whether the
// sidecar knew it. A request without a session id gets a fresh session of
// its own. Only a POST's new session is governed: a GET carries no client
// requests. A POST naming a session the sidecar never saw (it runs without
// affinity, or was restarted) registers it at once, before the upstream
// says whether it knows it: the session's other requests, which may come
// at the same moment, must find their calls in the same ledger, or their
// answers would name no request in flight. noteSession forgets it if the
// upstream refuses it.
func (rl relay) sessionFor(ctx *fasthttp.RequestCtx, governed bool) (*session, bool) {
	id := string(upstream.Peek(ctx.Request.Header.All(), upstream.SessionHeader))
	peer := rl.s.peerAddr(ctx)
	if id == "" {
		return newSession(id, rl.s, governed, peer), false
	}
	if sess, ok := rl.s.sessions.Lookup(id); ok {
		return sess, true
	}
	sess := newSession(id, rl.s, governed, peer)
	if !governed {
		return sess, false
	}
	sess.key = sessionKey(id) // before it is registered: read unlocked
	if got, err := rl.s.sessions.Add(id, sess); err == nil && got != sess {
		sess.closeGovernor()
		return got, true // registered by a request of the same moment
	}
	return sess, false
}

// post relays a POST: one JSON-RPC message or a batch from the client.
func (rl relay) post(ctx *fasthttp.RequestCtx) {
	sess, known := rl.sessionFor(ctx, true)
	if !known {
		rl.s.own.add(sess) // until requestDone
	}
	sess.setVersion(upstream.Peek(ctx.Request.Header.All(), upstream.VersionHeader))
	if !known && sess.sessionID() == "" {
		sess.principal = principalOf(&ctx.Request)
		sess.ownsSession()
	}
	streaming := false
	defer func() {
		if !streaming {
			rl.requestDone(sess)
		}
	}()
	var f framing.Frame
	if err := f.Parse(ctx.PostBody()); err != nil {
		writeJSON(ctx, fasthttp.StatusBadRequest, sess.t.Invalid(proxy.Client, err, ctx.PostBody()))
		return
	}
	if refuseTaskMismatch(ctx, &f) {
		return
	}
	sess.core.Lock()
	d := rl.decideFrame(sess, proxy.Client, &f, outbound{rl.s}.traceHeaders(&ctx.Request))
	st := newRelayed(rl.s.clock)
	st.posts = len(d.Requests) > 0 // before a cancel can find the stream
	for _, c := range d.Requests {
		sess.attach(c, st)
	}
	sess.core.Unlock()
	if len(d.Strays) > 0 {
		rl.s.askFleet(string(upstream.Peek(ctx.Request.Header.All(), upstream.SessionHeader)), d.Strays)
	}
	reserved := false // a slot held for the session the initialize opens, until the upstream names it
	if !known && !f.Batch && f.Msgs[0].Method == framing.MethodInitialize && len(d.Requests) == 1 {
		if !rl.s.sessions.Reserve(rl.s.peerOf(ctx)) {
			st.post().Headed() // never sent
			rl.refuseFull(ctx, sess, d.Requests)
			return
		}
		reserved = true
		defer func() {
			if reserved { // no session came of it
				rl.s.sessions.Unreserve()
			}
		}()
	}
	if !known && !f.Batch && len(d.Requests) == 1 {
		rl.modernizeSessionless(sess, &f.Msgs[0], &d)
		st.downgrade = d.upgraded != nil
		st.toolsList = st.downgrade && f.Msgs[0].Method == "tools/list"
	}
	if d.Trace.Parent != "" {
		setTraceHeaders(&ctx.Request, d.Trace)
	}
	if rl.streamJoined(ctx, sess, st, &d) {
		streaming = true // the request is done when its stream is
		return
	}
	if !rl.admit(ctx, sess, st, &d) {
		st.post().Headed() // never sent
		return
	}
	watch := rl.watchBeforeHeaders(ctx, sess, st, len(d.Requests))
	resp, err := outbound{rl.s}.forwardPost(ctx, sess, st, &d)
	if err != nil {
		endWatch(watch)
	}
	switch {
	case err != nil && !errors.Is(err, errGaveUp):
		rl.postFailed(ctx, sess, st, d, err)
		if !known {
			rl.unconfirmed(sess)
		}
		return
	case errors.Is(err, errGaveUp):
		sess.detach(st)
		if final := st.TakeFinal(); final != nil {
			writeJSON(ctx, fasthttp.StatusOK, proxy.JoinFrame(append(d.Replies, final), len(d.Replies) > 0))
		} else {
			rl.relayReplies(ctx, d.Replies, len(d.Requests) > 0)
		}
		return
	}
	sess = rl.noteSession(sess, known, resp, &reserved)
	streaming = rl.respond(ctx, sess, st, resp, d, watch)
}

// postFailed answers a POST that failed before the upstream's headers
// (err): each of its requests still in flight gets the loss. They are
// ended under the core's lock, as a deadline's Expire ends a call and sets
// its stream's last message: a request whose deadline came first gets
// that message (before, it got an empty body when the deadline came
// between the failure and the answer), and one whose deadline comes later
// finds it answered. One the client cancelled (its close in 2026-07-28)
// gets nothing more.
func (rl relay) postFailed(ctx *fasthttp.RequestCtx, sess *session, st *relayed, d decided, err error) {
	loss, why := upstream.PostLoss(err)
	if len(d.Requests) == 0 { // else each request's answer is logged
		rl.s.log.Warn("posting to the upstream failed", zap.String("upstream", rl.s.up.URL.Redacted()), zap.String("why", why))
	}
	sess.core.Lock()
	replies := rl.loseAll(sess, d.Requests, loss, why, d.Replies)
	sess.core.Unlock()
	sess.detach(st)
	if final := st.TakeFinal(); final != nil {
		replies = append(replies, final)
	}
	rl.relayReplies(ctx, replies, len(d.Requests) > 0)
}

// watchBeforeHeaders watches, in 2026-07-28, the client's connection
// while its requests wait for the upstream's headers: its close is their
// cancel (clientGone), which cuts the POST's connection when the server
// sends no headers until it answers (the go-sdk's, mcp-go's). Once the
// headers come, the stream's relay watches it (taking this watch on). It
// returns what stops the watch, nil when there is none.
func (rl relay) watchBeforeHeaders(ctx *fasthttp.RequestCtx, sess *session, st *relayed, requests int) (stop func()) {
	if requests == 0 || !sess.protocolVersion().CancelsByClose() {
		return nil // no watch
	}
	return rl.s.closes.Watch(ctx.Conn(), func() { rl.clientGone(sess, st) })
}

// endWatch stops a watch of watchBeforeHeaders, if there is one.
func endWatch(stop func()) {
	if stop != nil {
		stop()
	}
}

// refuseFull answers an initialize the relayed sessions' cap leaves no
// room for: 503 with Retry-After, the request never sent.
func (rl relay) refuseFull(ctx *fasthttp.RequestCtx, sess *session, calls []*proxy.Call) {
	for _, c := range calls {
		sess.t.Abandon(c)
	}
	rl.s.log.Warn("session refused: too many relayed sessions (http.max_relayed_sessions)", zap.Int("sessions", rl.s.sessions.Len()))
	ctx.Error("too many sessions: try again later\n", fasthttp.StatusServiceUnavailable)
	ctx.Response.Header.Set("Retry-After", relayedFullRetry) // after Error, which resets the headers
}

// admit decides whether a POST goes upstream: it waits for its held
// requests, answers at once what needs no upstream answer (reporting
// false), and sets the stream to linger after a cancel where the governor
// wants a late answer.
func (rl relay) admit(ctx *fasthttp.RequestCtx, sess *session, st *relayed, d *decided) bool {
	if len(d.Held) > 0 {
		var replies [][]byte
		d.Data, replies = rl.waitHeld(ctx, sess, d)
		d.Replies = append(d.Replies, replies...)
		if len(d.Requests) == 0 {
			sess.detach(st)
		}
	}
	switch {
	case d.Data == nil: // nothing left to forward
		// Cancelled while waiting: the stream ends without an answer.
		rl.relayReplies(ctx, d.Replies, len(d.Held) > 0)
		return false
	case len(d.Requests) == 0 && len(d.Cancels) > 0:
		// A cancel is answered at once; it goes upstream on its own.
		ctx.SetStatusCode(fasthttp.StatusAccepted)
		outbound{rl.s}.forwardDetached(ctx, d.Data, d.taken, d.Cancels)
		return false
	}
	switch {
	case d.DeferCancel:
		// While the policy keeps the client's cancel back (reissue: join),
		// the client's stream ends, but the upstream's answer is read on
		// for a re-issue that joins the call: in 2026-07-28 too, where the
		// client's close of the stream is the cancel, and the upstream's
		// is closed only once the governor sends it.
		st.LingerFor(rl.s.LateWatch)
		st.Keep()
	case d.WantsLate && rl.s.LateWatch > 0 && !sess.protocolVersion().CancelsByClose():
		// After a cancel the client's stream ends, but the upstream's
		// answer is still read a while, for the hooks that compensate it.
		// (In 2026-07-28 closing the upstream's stream is the cancel.)
		st.LingerFor(rl.s.LateWatch)
	}
	return true
}

// noteSession registers the session the upstream opened (in the slot
// reserved, if it holds one: it is then taken), or forgets one it no
// longer knows, and returns the session the answer belongs to.
func (rl relay) noteSession(sess *session, known bool, resp *fasthttp.Response, reserved *bool) *session {
	id := upstream.Peek(resp.Header.All(), upstream.SessionHeader)
	if len(id) == 0 && !known && sess.sessionID() != "" && resp.StatusCode() < 300 {
		// A session the upstream knows and this sidecar did not (it runs
		// without affinity, or was restarted): kept from now on, so that its
		// cancels find its requests.
		id = []byte(sess.sessionID())
	}
	switch {
	case len(id) > 0 && !known:
		if adopted := rl.adopt(string(id), sess, reserved); adopted != sess {
			sess.closeGovernor() // the id was known after all: this one is not kept
			sess = adopted
		}
		rl.s.log.Info("session opened", events.Mark(events.SessionOpened), zap.String("session", sess.scope))
	case !known && resp.StatusCode() >= 300:
		rl.s.sessions.RemoveIf(sess.sessionID(), sess) // registered on sight; refused
	case known && resp.StatusCode() == fasthttp.StatusNotFound:
		rl.expired(sess)
	}
	return sess
}

// expired forgets a session the upstream answered 404 for: it no longer
// knows it (it restarted, or let it expire), and the client will start
// anew; it counts against the cap no more. A connection error says no such
// thing, and forgets nothing.
func (rl relay) expired(sess *session) {
	if rl.s.sessions.Holds(sess.sessionID(), sess) {
		rl.s.sessions.RemoveIf(sess.sessionID(), sess)
		sess.closeGovernor()
		rl.s.log.Info("session expired upstream", zap.String("session", sess.scope))
	}
}

// unconfirmed forgets a session registered on sight (a POST named it, and
// this sidecar did not know it) whose POST failed before the upstream
// answered: nothing says the upstream knows it. Kept, it held a slot until
// http.session_idle (about 1,900 per load run with upstream crashes,
// after every client had deleted its session).
func (rl relay) unconfirmed(sess *session) {
	if id := sess.sessionID(); id != "" && rl.s.sessions.Holds(id, sess) {
		rl.s.sessions.RemoveIf(id, sess)
		sess.closeGovernor()
	}
}

// adopt registers sess under id, the session id the upstream assigned in
// its answer to initialize (in the slot reserved for it, which it takes),
// or one it knows and this sidecar did not, and returns the registered
// session. At the cap, with no slot reserved (a session of the upstream's
// this sidecar never saw open), sess serves its request unregistered, and
// the cap holds.
func (rl relay) adopt(id string, sess *session, reserved *bool) *session {
	sess.idMu.Lock()
	sess.id = id
	sess.idMu.Unlock()
	sess.key = sessionKey(id) // before it is registered: read unlocked
	sess.ownsSession()
	if *reserved {
		*reserved = false
		return rl.s.sessions.AddReserved(id, sess)
	}
	adopted, err := rl.s.sessions.Add(id, sess)
	if err != nil {
		rl.s.log.Warn("a session of the upstream's is not kept: too many relayed sessions (http.max_relayed_sessions)",
			zap.String("session", sess.scope))
		return sess
	}
	return adopted
}

// requestDone ends the governance of a session that was the request's own
// (no session, or one the upstream did not take), once its answer is done.
func (rl relay) requestDone(sess *session) {
	gov := sess.core.Governor()
	if gov == nil || rl.s.sessions.Holds(sess.sessionID(), sess) {
		rl.s.own.done(sess)
		return
	}
	if sess.lingerFn == nil { // kept as the session is renewed
		sess.lingerFn = func() { relay{sess.sc}.lingerDone(sess) }
	}
	if l, ok := gov.(proxy.Lingerer); ok && l.Linger(sess.lingerFn) {
		// The tasks it hosts outlast the request (a request without a
		// session, 2026-07-28): the session ends with the last of them,
		// or with the sidecar (CancelAll).
		sess.lingers.Store(true)
		return
	}
	sess.closeGovernor()
	rl.s.own.done(sess) // after: a spent session's governor has ended
}

// lingerDone ends a session that outlasted its request for the tasks it
// hosted, once the last of them is over.
func (rl relay) lingerDone(sess *session) {
	rl.s.own.done(sess)
	sess.endOwn()
	sess.closeGovernor()
}

// emptyStream answers a POST whose requests were all cancelled before the
// upstream saw them: an event stream that ends without a message.
func emptyStream(ctx *fasthttp.RequestCtx) {
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("text/event-stream")
}

// forwardPost forwards a POST (d's frame). When a request of it has a
// deadline, or its stream lingers after a cancel, the wait for the
// upstream's headers is given up as soon as the stream ends (or the
// client's side of it), and errGaveUp returned; an answer that comes later
// is read for the tracker alone when the stream lingers, else closed. A
// call the relay sent upgraded (d.upgraded) goes with the headers that
// mirror its parameters, sent once more if the upstream refuses them
// (upstream.AfterCall).
func (ob outbound) forwardPost(ctx *fasthttp.RequestCtx, sess *session, st *relayed, d *decided) (*fasthttp.Response, error) {
	r := upstream.Request{Body: d.Data, From: &ctx.Request, Posting: st.post()}
	list := upstream.ToolsRead{Log: ob.s.log}
	if d.upgraded != nil {
		r.Msg, r.Tools = d.upgraded, ob.s.up.Tools()
		ob.s.up.BeforeCall(&r, list)
	}
	if !d.Timed && st.Quit() == nil {
		resp, err := ob.s.up.Do(r, 0)
		st.post().Headed()
		if err != nil {
			return nil, err
		}
		return ob.s.up.AfterCall(r, resp, list)
	}
	return ob.forwardTimed(sess, st, d, r, list)
}

// forwardTimed is forwardPost for a POST whose wait for the upstream's
// headers may be given up (a deadline, a lingering stream): r is its
// request, list how a second try reads tools/list.
func (ob outbound) forwardTimed(sess *session, st *relayed, d *decided, r upstream.Request, list upstream.ToolsRead) (*fasthttp.Response, error) {
	// The POST may outlive the handler (a deadline, or the client's
	// cancel, before the upstream's headers), and the client's next
	// request reuses ctx's buffers: its body goes as a copy (before, the
	// upstream read a body being overwritten: a data race under load),
	// and a second try is built from the first (its client's headers).
	r.Body = bytes.Clone(d.Data)
	req := fasthttp.AcquireRequest()
	ob.s.up.Build(req, r) // copied before ctx is reused
	r.From, r.Posting = req, nil
	type answer struct {
		resp *fasthttp.Response
		err  error
	}
	got := make(chan answer, 1)
	ob.s.bg.Go(func() {
		defer fasthttp.ReleaseRequest(req)
		resp, err := ob.s.up.Send(req, 0)
		st.post().Headed()
		if err == nil {
			resp, err = ob.s.up.AfterCall(r, resp, list)
		}
		got <- answer{resp, err}
	})
	select {
	case a := <-got:
		return a.resp, a.err
	case <-st.Watched():
	case <-st.Quit():
	}
	if st.Quit() == nil && sess.protocolVersion().CancelsByClose() {
		// The client's close, or a deadline, is the cancel: with no
		// headers yet, the request's connection is all there is to close.
		st.post().Cut()
	}
	sess.late.Store(true)
	ob.s.bg.Go(func() { // the answer comes to nobody
		a := <-got
		if a.resp == nil {
			return
		}
		if st.Quit() != nil && st.SetBody(upstream.BodyOf(a.resp)) {
			ob.toTracker(sess, a.resp) // a late answer: suppressed, and seen
			return
		}
		a.resp.CloseBodyStream()
		fasthttp.ReleaseResponse(a.resp)
	})
	return nil, errGaveUp
}

// toTracker reads an upstream answer, JSON or an event stream, puts
// every message in it to the session's tracker, and releases the response:
// for answers no client waits for (the proxy's own requests, late answers).
func (ob outbound) toTracker(sess *session, resp *fasthttp.Response) {
	defer fasthttp.ReleaseResponse(resp)
	ob.readAnswer(sess, resp, nil)
}

// readAnswer reads an upstream answer, JSON or an event stream, to its
// end, putting every message in it to the session's tracker; send, if not
// nil, gets what is left to relay of it: the JSON frame, or each event as
// it goes on the wire (event true).
func (ob outbound) readAnswer(sess *session, resp *fasthttp.Response, send func(b []byte, event bool)) {
	rl := relay{ob.s}
	var f framing.Frame
	if !upstream.IsEventStream(resp.Header.ContentType()) {
		if f.Parse(readBody(resp, ob.s.maxBody)) == nil {
			if d := rl.decideFrame(sess, proxy.Server, &f, proxy.TraceContext{}); d.Data != nil && send != nil {
				send(d.Data, false)
			}
		}
		return
	}
	ob.eachEvent(resp, func(ev *framing.Event) {
		if out := rl.filterEvent(sess, ev, &f, nil); len(out) > 0 && send != nil {
			send(out, true)
		}
	})
}

// eachEvent reads an upstream answer's event stream to its end, handing
// each event to each, then closes it.
func (ob outbound) eachEvent(resp *fasthttp.Response, each func(ev *framing.Event)) {
	rd := ob.newSSEReader(resp)
	defer rd.Release()
	for {
		ev, err := rd.Next()
		if err != nil {
			break
		}
		each(ev)
	}
	resp.CloseBodyStream()
}

// respond relays the upstream's answer to a POST; it reports whether the
// answer goes on streaming after it returns. watch stops the watch of the
// client's close begun before the headers: an event stream's relay takes
// it on (the same connection, the same cancel), else it stops here.
func (rl relay) respond(ctx *fasthttp.RequestCtx, sess *session, st *relayed, resp *fasthttp.Response, d decided, watch func()) bool {
	status := resp.StatusCode()
	failed, events := status >= 500 && len(d.Requests) > 0, upstream.IsEventStream(resp.Header.ContentType())
	if failed || !events {
		endWatch(watch) // no stream to relay: the watch ends with the headers
	}
	if failed {
		head := upstream.ReadHead(resp)
		sess.detach(st)
		rl.s.log.Error("upstream failed", zap.Int("status", status), zap.Int("body_bytes", len(head)))
		outbound{rl.s}.payload("the upstream's error body", head)
		rl.failRequests(ctx, sess, d.Requests, fmt.Sprintf("the upstream MCP server failed with HTTP %d", status))
		return false
	}
	if events && !st.SetBody(upstream.BodyOf(resp)) {
		// Every request it was to answer was ended before it began.
		endWatch(watch)
		fasthttp.ReleaseResponse(resp)
		sess.detach(st)
		if final := st.TakeFinal(); final != nil {
			writeJSON(ctx, fasthttp.StatusOK, final)
		} else {
			emptyStream(ctx)
		}
		return false
	}
	rl.s.copyResponseHeaders(ctx, resp)
	ctx.SetStatusCode(status)
	if events {
		ctx.Response.Header.Set("X-Accel-Buffering", "no")
		relay := rl.newSSERelay(sess, st, resp, ctx.Conn(), d.Replies, watch)
		relay.lazyHead = true // the headers go with the first event: one write, not two
		ctx.SetBodyStream(relay, -1)
		return true
	}
	defer sess.detach(st)
	rl.relayJSON(ctx, sess, st, resp, d)
	// A JSON answer is whole: requests it did not answer never will be.
	for _, c := range d.Requests {
		sess.t.Abandon(c)
	}
	return false
}

// relayJSON relays a JSON response, held back where the tracker says so.
// A request the answer does not answer (cut short, unreadable, over the
// limit, empty, not JSON-RPC, or the answer to another id) is answered
// with the proxy's -32000 (upstream_spoiled), in HTTP 200: no request waits
// for an answer that cannot come.
func (rl relay) relayJSON(ctx *fasthttp.RequestCtx, sess *session, st *relayed, resp *fasthttp.Response, d decided) {
	st.SetBody(upstream.BodyOf(resp)) // so that a deadline can cut the read short
	read := func() ([]byte, error) {
		body, err := upstream.ReadAll(resp.BodyStream(), resp.Header.ContentLength(), rl.s.maxBody)
		st.CloseWithError(nil)
		fasthttp.ReleaseResponse(resp)
		return body, err
	}
	replies := d.Replies
	var body []byte
	var err error
	if st.Quit() == nil {
		body, err = read()
	} else if body, err = rl.readOrQuit(sess, st, read); errors.Is(err, errGaveUp) {
		// Cancelled, or past its deadline, whose message ends the stream
		// (before, it was left behind: 8 of 2,400 calls whose answer came
		// at their deadline got an empty body); the answer is read on, for
		// the tracker alone.
		if final := st.TakeFinal(); final != nil {
			replies = append(replies, final)
		}
		rl.relayReplies(ctx, replies, true)
		return
	}
	if final := st.TakeFinal(); final != nil {
		writeJSON(ctx, fasthttp.StatusOK, proxy.JoinFrame(append(replies, final), len(replies) > 0))
		return
	}
	if err != nil && st.WasCut() { // the requests were cancelled: their answer is not awaited
		rl.relayReplies(ctx, replies, true)
		return
	}
	var f framing.Frame
	spoiled := upstream.SpoiledBody(body, err, rl.s.maxBody, &f)
	switch {
	case spoiled != "" && len(d.Requests) > 0 && ctx.Response.StatusCode() < 300:
		rl.relayReplies(ctx, rl.loseAll(sess, d.Requests, spoiledLoss, spoiled, replies), true)
		return
	case spoiled != "" && (err != nil || len(body) > rl.s.maxBody):
		rl.s.log.Error("upstream response unreadable or over the size limit", zap.String("why", spoiled))
		ctx.Error("bad gateway", fasthttp.StatusBadGateway)
		return
	case spoiled != "":
		ctx.SetBody(body) // not JSON-RPC (an HTTP error page, a 202): as it is
		return
	}
	rl.answerJSON(ctx, sess, st, &f, body, d.Requests, replies)
}

// answerJSON relays f, the upstream's JSON answer (body) to a POST that
// carried calls, with the proxy's own replies: what the tracker passes of
// it, and the proxy's error for each call it does not answer.
func (rl relay) answerJSON(ctx *fasthttp.RequestCtx, sess *session, st *relayed, f *framing.Frame, body []byte, calls []*proxy.Call, replies [][]byte) {
	// Decided under the core's lock, as a deadline's Expire ends a call
	// and sets its stream's last message: an answer that lost the race
	// to the deadline is suppressed, and the deadline's message is then
	// on the stream (before, the client got an empty stream).
	sess.core.Lock()
	dd := rl.decideFrame(sess, proxy.Server, f, proxy.TraceContext{})
	if ctx.Response.StatusCode() < 300 {
		// The requests it does not answer never will be: each gets the
		// proxy's error beside what it does answer.
		replies = rl.loseAll(sess, calls, spoiledLoss, upstream.NotAnswered, replies)
	}
	sess.core.Unlock()
	if final := st.TakeFinal(); final != nil {
		replies = append(replies, final)
	}
	if st.downgrade && dd.Data != nil {
		// Answered in the client's own revision: a JSON-RPC error is
		// HTTP 200 there (a 2026-07-28 server says 400), and a result has
		// no resultType.
		dd.Data = rl.downgrade(st, dd.Data)
		ctx.SetStatusCode(fasthttp.StatusOK)
	}
	switch {
	case dd.Data != nil && len(replies) == 0:
		ctx.SetBody(dd.Data) // the answer alone, a message or a batch
	case dd.Data != nil || len(replies) > 0:
		// The proxy's own answers and the upstream's, in one batch: a
		// batch's answers each, never the batch within a batch.
		out := replies
		if f.Batch {
			out = append(out, dd.Kept...)
		} else if dd.Data != nil {
			out = append(out, dd.Data)
		}
		ctx.SetStatusCode(fasthttp.StatusOK)
		ctx.SetBody(proxy.JoinFrame(out, len(out) > 1 || f.Batch))
	case dd.Suppressed > 0: // the late answer of a cancelled request
		emptyStream(ctx)
	default:
		// The answer names no request in flight under an error status
		// (FastMCP answers what it cannot place with the id
		// "server-error" and HTTP 400): the client gets it as it is,
		// never a 202 in place of an answer.
		rl.s.log.Warn("upstream answer names no request in flight: relayed as it is",
			zap.String("session", sess.scope), zap.Int("status", ctx.Response.StatusCode()))
		ctx.SetBody(body)
	}
}

// spoiledLoss is the Loss of a request whose JSON answer was spoiled: the
// server had it.
var spoiledLoss = proxy.Loss{Reason: proxy.ReasonSpoiled, MayHaveRun: true}

// loseAll ends each of calls still in flight, whose upstream spoiled or
// lost its answer (l, why), and returns replies with the proxy's answer
// for each appended.
func (rl relay) loseAll(sess *session, calls []*proxy.Call, l proxy.Loss, why string, replies [][]byte) [][]byte {
	for _, c := range calls {
		if r := rl.lose(sess, c, l, why); r != nil {
			replies = append(replies, r)
		}
	}
	return replies
}

// lose ends c, whose upstream spoiled or lost its answer, and returns the
// proxy's answer for it, logged and counted once; nil if it was no longer
// in flight.
func (rl relay) lose(sess *session, c *proxy.Call, l proxy.Loss, why string) []byte {
	r := sess.t.FailLost(c, l, why)
	if r != nil {
		upstream.Lost(rl.s.log, rl.s.OnUpstreamError, c.ID(), l, why)
	}
	return r
}

// readOrQuit reads a lingering stream's JSON answer, unless the client's
// side ends first (errGaveUp): then the answer is read on in the
// background, and put to the tracker alone, so that a late answer is seen.
func (rl relay) readOrQuit(sess *session, st *relayed, read func() ([]byte, error)) ([]byte, error) {
	type answer struct {
		body []byte
		err  error
	}
	got := make(chan answer, 1)
	rl.s.bg.Go(func() {
		body, err := read()
		got <- answer{body, err}
	})
	select {
	case a := <-got:
		return a.body, a.err
	case <-st.Quit():
		sess.late.Store(true)
		rl.s.bg.Go(func() {
			var f framing.Frame
			if a := <-got; a.err == nil && f.Parse(a.body) == nil {
				rl.decideFrame(sess, proxy.Server, &f, proxy.TraceContext{}) // a late answer: suppressed, and seen
			}
		})
		return nil, errGaveUp
	}
}

// relayReplies answers with the proxy's own replies; if there are none, a
// POST that carried requests (all cancelled) gets an event stream that ends
// without a message, any other 202: a request is never answered 202.
func (rl relay) relayReplies(ctx *fasthttp.RequestCtx, replies [][]byte, requests bool) {
	switch {
	case len(replies) == 0 && requests:
		emptyStream(ctx)
		return
	case len(replies) == 0:
		ctx.Response.Header.Del("Content-Type")
		ctx.SetStatusCode(fasthttp.StatusAccepted)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, proxy.JoinFrame(replies, len(replies) > 1))
}

// failRequests answers the client's requests with errors, as JSON.
func (rl relay) failRequests(ctx *fasthttp.RequestCtx, sess *session, calls []*proxy.Call, why string) {
	if rl.s.OnUpstreamError != nil {
		rl.s.OnUpstreamError()
	}
	var replies [][]byte
	for _, c := range calls {
		if r := sess.t.Fail(c, proxy.CodeServerGone, why); r != nil {
			replies = append(replies, r)
		}
	}
	rl.relayReplies(ctx, replies, len(calls) > 0)
}

// get relays the standalone event stream that carries the server's own
// requests and notifications.
func (rl relay) get(ctx *fasthttp.RequestCtx) {
	sess, known := rl.sessionFor(ctx, false)
	if len(upstream.Peek(ctx.Request.Header.All(), "Last-Event-ID")) > 0 {
		sess.resumed(rl.s.clock.Now())
	}
	resp, err := outbound{rl.s}.forward(ctx, fasthttp.MethodGet, nil)
	if err != nil {
		rl.s.log.Error("upstream unreachable", zap.String("error", upstream.Brief(err)))
		ctx.Error("upstream unreachable", fasthttp.StatusBadGateway)
		return
	}
	if known && resp.StatusCode() == fasthttp.StatusNotFound {
		rl.expired(sess)
	}
	rl.s.copyResponseHeaders(ctx, resp)
	ctx.SetStatusCode(resp.StatusCode())
	st := newRelayed(rl.s.clock)
	if resp.StatusCode() == fasthttp.StatusOK && upstream.IsEventStream(resp.Header.ContentType()) && st.SetBody(upstream.BodyOf(resp)) {
		body := rl.newSSERelay(sess, st, resp, ctx.Conn(), nil, nil)
		if !rl.s.detached.Serve(ctx, body, func() { st.CloseWithError(errShutdown) }) {
			ctx.Response.ImmediateHeaderFlush = true // servers send no event on a fresh GET stream
			ctx.SetBodyStream(body, -1)
		}
		return
	}
	ctx.SetBody(upstream.ReadHead(resp))
}

// delete ends a session: its requests in flight are cancelled upstream
// first, then the DELETE is relayed.
func (rl relay) delete(ctx *fasthttp.RequestCtx) {
	id := string(upstream.Peek(ctx.Request.Header.All(), upstream.SessionHeader))
	if sess, ok := rl.s.sessions.Remove(id); ok {
		rl.s.log.Info("session deleted", zap.String("session", sess.scope))
		rl.endSession(sess)
	}
	if rl.s.Fleet != nil && id != "" {
		rl.s.Fleet.EndSession(sessionKey(id)) // the session's requests held by other replicas
	}
	resp, err := outbound{rl.s}.forward(ctx, fasthttp.MethodDelete, nil)
	if err != nil {
		ctx.Error("upstream unreachable", fasthttp.StatusBadGateway)
		return
	}
	rl.s.copyResponseHeaders(ctx, resp)
	ctx.SetStatusCode(resp.StatusCode())
	ctx.SetBody(upstream.ReadHead(resp))
}

// endSession cancels upstream a deleted session's requests in flight
// (source session_end), ends their streams and its governance.
func (rl relay) endSession(sess *session) {
	sess.core.CancelAll(proxy.SourceSessionEnd, "session deleted", nil)
	sess.notifying.Wait(ownedWait) // before the upstream ends the session
	sess.endAll()
	sess.closeGovernor()
}

// payload logs, at debug level, the start of what the sidecar refused or
// could not place, when the configuration asks for payloads in logs.
func (ob outbound) payload(what string, b []byte) {
	if ob.s.Tracker.LogPayloads {
		ob.s.log.Debug(what, zap.ByteString("head", b[:min(len(b), 200)]))
	}
}

// forward sends the client's request upstream with the given method and
// body, and returns the response with its body still streaming.
func (ob outbound) forward(ctx *fasthttp.RequestCtx, method string, body []byte) (*fasthttp.Response, error) {
	return ob.s.up.Do(upstream.Request{Method: method, Body: body, From: &ctx.Request}, 0)
}

// notify POSTs a notification of the proxy's own to the upstream, in a
// session, and waits for the answer (202); the cancels it holds, if any,
// are of calls, and it is sent once the POSTs of their requests allow
// (taken, upstream.Posting.BeforeCancel).
func (ob outbound) notify(sess *session, msg []byte, taken []*upstream.Posting, calls ...*proxy.Call) {
	start := time.Now()
	ob.beforeCancel(taken)
	resp, err := ob.s.up.Do(upstream.Request{Body: msg, Session: sess.sessionID(), Version: string(sess.protocolVersion())}, 0)
	if err != nil {
		ob.s.log.Warn("notifying the upstream failed", zap.String("session", sess.scope), zap.String("error", upstream.Brief(err)))
		return
	}
	if status := resp.StatusCode(); status >= 300 {
		body := upstream.ReadHead(resp)
		ob.s.log.Warn("the upstream refused a notification", zap.String("session", sess.scope), zap.Int("status", status),
			zap.Int("body_bytes", len(body)))
		ob.payload("the upstream's refusal", body)
		return
	}
	upstream.ReadHead(resp)
	ob.notified(start, calls)
}

// goNotify notifies the upstream (see notify) on a goroutine the session
// and the sidecar own: a shutdown waits for them.
func (ob outbound) goNotify(sess *session, msg []byte, taken []*upstream.Posting, calls ...*proxy.Call) {
	ob.s.notifying.Add()
	sess.notifying.Add()
	go func() {
		defer ob.s.notifying.Done()
		defer sess.notifying.Done()
		ob.notify(sess, msg, taken, calls...)
	}()
}

// beforeCancel waits until a cancel of requests whose POSTs have got as
// far as taken may be sent: never before a request itself.
func (ob outbound) beforeCancel(taken []*upstream.Posting) {
	for _, p := range taken {
		p.BeforeCancel(ob.s.clock, nil)
	}
}

// forwardDetached sends a client's cancel upstream without waiting for its
// answer, once the POSTs of its requests (taken) allow.
func (ob outbound) forwardDetached(ctx *fasthttp.RequestCtx, body []byte, taken []*upstream.Posting, calls []*proxy.Call) {
	start := ctx.Time() // when the client's cancel came
	req := fasthttp.AcquireRequest()
	ob.s.up.Build(req, upstream.Request{Body: body, From: &ctx.Request}) // copied before ctx is reused
	ob.s.notifying.Go(func() {
		defer fasthttp.ReleaseRequest(req)
		ob.beforeCancel(taken)
		if resp, err := ob.s.up.Send(req, 0); err != nil {
			ob.s.log.Warn("forwarding a cancel upstream failed", zap.String("error", upstream.Brief(err)))
		} else {
			if resp.StatusCode() < 300 {
				ob.notified(start, calls)
			}
			upstream.ReadHead(resp)
		}
	})
}

// notified reports a cancel's notification answered by the upstream, start
// being when the cancel came, and records it on the cancelled calls' spans.
func (ob outbound) notified(start time.Time, calls []*proxy.Call) {
	if ob.s.OnNotified != nil {
		ob.s.OnNotified(time.Since(start))
	}
	for _, c := range calls {
		c.Span().Event(proxy.EventCancelForwarded)
	}
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, body []byte) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// traceHeaders returns the W3C trace context headers of a client's POST,
// when the sidecar traces requests.
func (ob outbound) traceHeaders(req *fasthttp.Request) proxy.TraceContext {
	if ob.s.NewTracer == nil {
		return proxy.TraceContext{}
	}
	return proxy.TraceContext{Parent: string(req.Header.Peek("traceparent")), State: string(req.Header.Peek("tracestate"))}
}

// setTraceHeaders sets a request's W3C trace context headers to tc.
func setTraceHeaders(req *fasthttp.Request, tc proxy.TraceContext) {
	req.Header.Set("traceparent", tc.Parent)
	if tc.State != "" {
		req.Header.Set("tracestate", tc.State)
	} else {
		req.Header.Del("tracestate")
	}
}

package httpx

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/demux"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/sessiontable"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/stream"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// childPost relays a POST to the session's child.
func (lu lineUpstream) childPost(ctx *fasthttp.RequestCtx) {
	var f framing.Frame
	body, err := upstream.OneLine(ctx.PostBody())
	if err != nil { // framing's own words, where it has any
		err = cmp.Or(f.Parse(ctx.PostBody()), err)
	} else {
		err = f.Parse(body)
	}
	if err != nil {
		writeJSON(ctx, fasthttp.StatusBadRequest, lu.childInvalid(ctx, err))
		return
	}
	if refuseMismatch(ctx, &f, &lu.s.Children.tools) {
		return
	}
	if len(upstream.Peek(ctx.Request.Header.All(), upstream.SessionHeader)) == 0 {
		switch m := &f.Msgs[0]; {
		case f.Batch:
			// Only initialize opens a session, and it is never batched.
			writeJSON(ctx, fasthttp.StatusBadRequest, proxy.ErrorReply(framing.ID{}, framing.CodeInvalidRequest,
				"Invalid Request: a batch needs a session: initialize first"))
			return
		case m.Kind != framing.KindRequest || m.Method != framing.MethodInitialize:
			lu.sharedPost(ctx, body, &f)
			return
		}
	}
	c, status, why := lu.childSessionFor(ctx, &f)
	if c == nil && status == fasthttp.StatusInternalServerError {
		cannotStart(ctx, &f)
		return
	}
	if c == nil {
		ctx.Error(why, status)
		return
	}
	lu.headerTraceInto(ctx, &f, body)
	var sub *stdio.Submitted
	var st *stream.Events
	err = c.Sess.Submit(&f, proxy.TraceContext{}, stdio.From{}, func(s *stdio.Submitted) {
		sub = s
		if len(s.Requests) > 0 {
			st = c.Open(s.Requests)
		}
		for _, e := range s.Ended { // after Open: a batch may cancel a request of its own
			c.Cancelled(e, lu.s.grace)
		}
	})
	if err != nil {
		lu.s.log.Warn("the server's session has ended", zap.Error(err))
		if m := &f.Msgs[0]; !f.Batch && m.Method == framing.MethodInitialize {
			// A new session's server already gone: its client gets the
			// proxy's error, as for a request in flight when it went.
			writeJSON(ctx, fasthttp.StatusOK, demux.ServerGone(m.ID))
			return
		}
		ctx.Error("the MCP server has exited", fasthttp.StatusNotFound) // the client starts a new session
		return
	}
	if st == nil { // notifications and answers only, or requests refused
		relay{lu.s}.relayReplies(ctx, sub.Replies, false)
		return
	}
	for _, r := range sub.Replies { // refusals of other messages of the batch
		st.Send(r, false)
	}
	calls := sub.Requests
	// With the disconnect grace, a client that leaves the stream and never
	// POSTs a cancel has its requests cancelled after it. (This mode keeps
	// no event ids, so the client cannot resume the stream meanwhile.)
	st.OnAbort = func() {
		// A poll the proxy answers itself (tasks/result) ends with its
		// stream: nothing runs for it in the server.
		calls := slices.DeleteFunc(slices.Clone(calls), c.Sess.Left)
		lu.s.afterDisconnect(c.Log, len(calls), nil, func() { c.cancelAbandoned(st, calls, "client disconnected") })
	}
	// A stream the client left no longer keeps its session from the idle
	// sweep, even while its request runs on.
	st.StopWatch = lu.s.closes.Watch(ctx.Conn(), st.Abort)
	ctx.Response.Header.Set(upstream.SessionHeader, c.ID)
	stream.Serve(ctx, st)
}

// childInvalid returns the error owed for a POST body that does not
// parse, counted by its session when it names one.
func (lu lineUpstream) childInvalid(ctx *fasthttp.RequestCtx, err error) []byte {
	if id := upstream.Peek(ctx.Request.Header.All(), upstream.SessionHeader); len(id) > 0 {
		if c, ok := lu.s.Children.sessions.Lookup(string(id)); ok {
			return c.Sess.Invalid(err, ctx.PostBody())
		}
	}
	code, msg := framing.CodeParseError, "Parse error: "
	if _, invalid := err.(*framing.InvalidError); invalid {
		code, msg = framing.CodeInvalidRequest, "Invalid Request: "
	}
	return proxy.ErrorReply(framing.ErrorID(err), code, msg+err.Error())
}

// headerTraceInto continues, when the proxy traces, the trace context of a
// POST's traceparent header in a request that carries none in its
// params._meta: a stdio server's session reads only the line, so the header
// goes into _meta, where the session's tracker continues it (and replaces
// it with the proxy's span, as on the relay). f, parsed from line, is the
// frame to send: parsed anew from the traced bytes where they changed.
func (lu lineUpstream) headerTraceInto(ctx *fasthttp.RequestCtx, f *framing.Frame, line []byte) {
	tc := outbound{lu.s}.traceHeaders(&ctx.Request)
	if tc.Parent == "" || f.Batch || f.Msgs[0].Kind != framing.KindRequest || f.Msgs[0].TraceParentSpan.Found() {
		return
	}
	traced, err := framing.WithTraceContext(&f.Msgs[0], tc.Parent, tc.State)
	if err != nil || f.Parse(traced) != nil {
		f.Parse(line)
	}
}

// cancelAbandoned cancels, on the client's behalf, the requests of a
// stream the client left that are still unanswered.
func (c *childSession) cancelAbandoned(st *stream.Events, calls []*proxy.Call, reason string) {
	for _, call := range calls {
		if c.Abandon(call, st) {
			c.Sess.Cancel(call, proxy.SourceDisconnect, reason)
		}
	}
}

// childSessionFor finds the request's session, or opens one for an
// initialize; otherwise it returns nil, and the HTTP status and message to
// answer.
func (lu lineUpstream) childSessionFor(ctx *fasthttp.RequestCtx, f *framing.Frame) (*childSession, int, string) {
	cs := lu.s.Children
	if id := string(upstream.Peek(ctx.Request.Header.All(), upstream.SessionHeader)); id != "" {
		if c, ok := cs.sessions.Lookup(id); ok {
			return c, 0, ""
		}
		return nil, fasthttp.StatusNotFound, "unknown or ended session: initialize anew"
	}
	cs.mu.Lock() // one session starts at a time: the cap holds
	defer cs.mu.Unlock()
	peer := lu.s.peerOf(ctx)
	if !cs.sessions.RoomFor(peer) {
		lu.s.log.Warn("session refused: too many sessions, none idle that this client may evict", zap.Int("sessions", cs.sessions.Len()))
		return nil, fasthttp.StatusServiceUnavailable, "too many sessions"
	}
	c, err := cs.start(lu.s.log.With(zap.String("session", fmt.Sprintf("s%d", scopes.Add(1)))), peer)
	if err != nil {
		lu.s.log.Error("cannot start the server", zap.Error(err))
		return nil, fasthttp.StatusInternalServerError, "cannot start the MCP server"
	}
	c.Owner = peer
	if _, err := cs.sessions.Add(c.ID, c); err != nil { // full after all: the child stops again
		lu.s.bg.Go(func() { c.Stop(proxy.SourceSessionEnd, "too many sessions") })
		return nil, fasthttp.StatusServiceUnavailable, "too many sessions"
	}
	if c.ended.Load() { // it ended before it was added: forget it now
		cs.sessions.RemoveIf(c.ID, c)
	}
	return c, 0, ""
}

// childGet opens the session's standalone stream.
func (lu lineUpstream) childGet(ctx *fasthttp.RequestCtx) {
	c, ok := lu.s.Children.sessions.Lookup(string(upstream.Peek(ctx.Request.Header.All(), upstream.SessionHeader)))
	if !ok {
		ctx.Error("unknown session", fasthttp.StatusNotFound)
		return
	}
	st := stream.NewEvents(c.clock, 0)
	c.Listen(st)
	st.StopWatch = lu.s.closes.Watch(ctx.Conn(), st.Abort)
	stream.ServeDetached(ctx, st, &lu.s.detached)
}

// childDelete ends a session: the child's stdin closes, and the stop
// ladder follows.
func (lu lineUpstream) childDelete(ctx *fasthttp.RequestCtx) {
	id := string(upstream.Peek(ctx.Request.Header.All(), upstream.SessionHeader))
	c, ok := lu.s.Children.sessions.Lookup(id)
	if !ok {
		ctx.Error("unknown session", fasthttp.StatusNotFound)
		return
	}
	c.Stop(proxy.SourceSessionEnd, "session deleted")
	ctx.SetStatusCode(fasthttp.StatusOK)
}

// Count returns how many servers run behind the sidecar: the stdio
// processes started and not yet ended, for every kind of session (each
// Streamable HTTP client's, the shared one of sessionless requests, old
// clients'); for an HTTP+SSE upstream, the sessions dialled.
func (cs *Children) Count() int {
	if c, ok := cs.starts(); ok {
		return c.Running()
	}
	n := cs.sessions.Len()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.shared != nil {
		n++
	}
	return n
}

// retire stops the server of a session the sidecar forgot.
func (c *childSession) Retire(why string) {
	switch why {
	case sessiontable.RetireIdle:
		c.Log.Info("session idle: stopping its server", events.Mark(events.SessionIdle))
	case sessiontable.RetireEvicted:
		c.Log.Info("session evicted: the least recently used idle session makes room for a new one")
	}
	c.retiring.Go(func() { c.StopAndWait(proxy.SourceSessionEnd, "session "+why) })
}

// busy reports whether a stream of the session is open.
func (c *childSession) Busy() bool { return c.Streaming() }

// stopAll ends every session: each child's stdin closes and the stop ladder
// follows; it returns once every child has exited and its session ended.
func (cs *Children) stopAll(reason string) {
	all := cs.sessions.All()
	cs.mu.Lock()
	if cs.shared != nil {
		all = append(all, cs.shared)
	}
	cs.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range all {
		wg.Go(func() { c.StopAndWait(proxy.SourceShutdown, reason) })
	}
	wg.Wait()
	cs.retiring.Wait() // the sessions stopped for being idle or evicted
}

// sharedPost serves a request without a session (protocol 2026-07-28) on the
// child shared by all such requests: the session's core renames its id and
// progress token where another client's request in flight holds them, and
// a client that closes the stream before the answer has the child sent
// notifications/cancelled for it, which on stdio is how 2026-07-28
// cancels. Notifications get 202 and go nowhere: a client-chosen id must
// never cancel another client's request.
func (lu lineUpstream) sharedPost(ctx *fasthttp.RequestCtx, line []byte, f *framing.Frame) {
	if f.Msgs[0].Kind != framing.KindRequest {
		ctx.SetStatusCode(fasthttp.StatusAccepted)
		return
	}
	c, err := lu.s.Children.sharedChild(lu.s.log)
	if err != nil {
		lu.s.log.Error("cannot start the server", zap.Error(err))
		cannotStart(ctx, f)
		return
	}
	var sub *stdio.Submitted
	var st *stream.Events
	// The principal says whose it is: a re-issue joins only its own.
	lu.headerTraceInto(ctx, f, line)
	from := stdio.From{Principal: principalOf(&ctx.Request), Peer: lu.s.peerOf(ctx)}
	err = c.Sess.Submit(f, proxy.TraceContext{}, from, func(s *stdio.Submitted) {
		if sub = s; len(s.Requests) > 0 {
			st = c.Open(s.Requests)
		}
	})
	if err != nil {
		ctx.Error("the MCP server has exited", fasthttp.StatusBadGateway)
		return
	}
	if st == nil { // refused
		relay{lu.s}.relayReplies(ctx, sub.Replies, false)
		return
	}
	st.OnAbort = func() {
		c.cancelAbandoned(st, sub.Requests, "the client closed the stream")
		streamLeft(c.Log, 1, leftCancelled)
	}
	st.StopWatch = lu.s.closes.Watch(ctx.Conn(), st.Abort)
	stream.Serve(ctx, st)
}

// sharedChild returns the child that serves sessionless requests, starting
// it if there is none (or the last one exited).
func (cs *Children) sharedChild(log *zap.Logger) (*childSession, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.shared != nil {
		select {
		case <-cs.shared.Session.Exited():
		default:
			return cs.shared, nil
		}
	}
	c, err := cs.start(log.With(zap.String("session", "shared")), "")
	if err != nil {
		return nil, err
	}
	c.Share()
	cs.shared = c
	return c, nil
}

// cannotStart answers a POST whose server could not be started: its
// requests get the proxy's -32000 (kind unavailable), which a client
// shows, in place of a bare HTTP 500; the cause is in the proxy's log,
// not told to the client (it names the server's command).
func cannotStart(ctx *fasthttp.RequestCtx, f *framing.Frame) {
	replies := cannotStartReplies(f)
	if len(replies) == 0 {
		ctx.Error("cannot start the MCP server", fasthttp.StatusInternalServerError)
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, proxy.JoinFrame(replies, f.Batch))
}

// cannotStartReplies are the proxy's -32000 (kind unavailable) for each
// request of f, whose server could not be started.
func cannotStartReplies(f *framing.Frame) [][]byte {
	var replies [][]byte
	for _, m := range f.Msgs {
		if m.Kind == framing.KindRequest {
			replies = append(replies, proxy.ErrorReplyKind(m.ID, proxy.CodeServerGone,
				"mcp-cancel-proxy: cannot start the MCP server (the proxy's log says why)", "unavailable"))
		}
	}
	return replies
}

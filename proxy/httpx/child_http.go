package httpx

import (
	"fmt"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// childPost relays a POST to the session's child.
func (s *Sidecar) childPost(ctx *fasthttp.RequestCtx) {
	var f framing.Frame
	body := ctx.PostBody()
	if err := f.Parse(body); err != nil {
		writeJSON(ctx, fasthttp.StatusBadRequest, proxy.NewTracker(proxy.TrackerOptions{}).Invalid(proxy.Client, err, body))
		return
	}
	c, status, why := s.childSessionFor(ctx, &f)
	if c == nil {
		ctx.Error(why, status)
		return
	}
	var ids, tokens []framing.ID
	for i := range f.Msgs {
		m := &f.Msgs[i]
		switch {
		case m.Kind == framing.KindRequest:
			ids = append(ids, m.ID)
			if m.Token.IsValid() {
				tokens = append(tokens, m.Token)
			}
		case m.Method == framing.MethodCancelled && m.RequestID.IsValid():
			c.cancelled(m.RequestID, s.CancelGrace)
		}
	}
	var st *outStream
	if len(ids) > 0 {
		st = c.open(ids, tokens)
	}
	if _, err := c.in.Write(append(append([]byte(nil), body...), '\n')); err != nil {
		s.log.Warn("the server's session has ended", zap.Error(err))
		ctx.Error("the MCP server has exited", fasthttp.StatusNotFound) // the client starts a new session
		return
	}
	if st == nil {
		ctx.SetStatusCode(fasthttp.StatusAccepted)
		return
	}
	ctx.Response.Header.Set(sessionHeader, c.id)
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.Header.Set("X-Accel-Buffering", "no")
	ctx.SetBodyStream(st, -1)
}

// childSessionFor finds the request's session, or opens one for an
// initialize; otherwise it returns nil, and the HTTP status and message to
// answer.
func (s *Sidecar) childSessionFor(ctx *fasthttp.RequestCtx, f *framing.Frame) (*childSession, int, string) {
	cs := s.Children
	id := string(ctx.Request.Header.Peek(sessionHeader))
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.sessions == nil {
		cs.sessions = make(map[string]*childSession)
	}
	if id != "" {
		if c := cs.sessions[id]; c != nil {
			return c, 0, ""
		}
		return nil, fasthttp.StatusNotFound, "unknown or ended session: initialize anew"
	}
	if f.Batch || f.Msgs[0].Method != framing.MethodInitialize {
		return nil, fasthttp.StatusBadRequest, "no Mcp-Session-Id: initialize first " +
			"(requests without a session, as in protocol 2026-07-28, are not served to a stdio server yet)"
	}
	max := cs.MaxSessions
	if max <= 0 {
		max = 64
	}
	if len(cs.sessions) >= max {
		s.log.Warn("session refused: too many sessions", zap.Int("sessions", len(cs.sessions)))
		return nil, fasthttp.StatusServiceUnavailable, "too many sessions"
	}
	c, err := cs.start(s.log.With(zap.String("scope", fmt.Sprintf("s%d", scopes.Add(1)))))
	if err != nil {
		s.log.Error("cannot start the server", zap.Error(err))
		return nil, fasthttp.StatusInternalServerError, "cannot start the MCP server"
	}
	cs.sessions[c.id] = c
	go func() { // forget the session once its child is gone
		<-c.proc.Exited()
		cs.mu.Lock()
		delete(cs.sessions, c.id)
		cs.mu.Unlock()
	}()
	return c, 0, ""
}

// childGet opens the session's standalone stream.
func (s *Sidecar) childGet(ctx *fasthttp.RequestCtx) {
	c := s.Children.lookup(string(ctx.Request.Header.Peek(sessionHeader)))
	if c == nil {
		ctx.Error("unknown session", fasthttp.StatusNotFound)
		return
	}
	st := newOutStream(0)
	c.mu.Lock()
	if c.get != nil {
		c.get.close()
	}
	c.get = st
	c.mu.Unlock()
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.SetBodyStream(st, -1)
}

// childDelete ends a session: the child's stdin closes, and the stop
// ladder follows.
func (s *Sidecar) childDelete(ctx *fasthttp.RequestCtx) {
	id := string(ctx.Request.Header.Peek(sessionHeader))
	c := s.Children.lookup(id)
	if c == nil {
		ctx.Error("unknown session", fasthttp.StatusNotFound)
		return
	}
	c.in.Close()
	ctx.SetStatusCode(fasthttp.StatusOK)
}

func (cs *Children) lookup(id string) *childSession {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.sessions[id]
}

// open registers a POST's requests and returns the stream for their answers.
func (c *childSession) open(ids, tokens []framing.ID) *outStream {
	st := newOutStream(len(ids))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		st.close()
		return st
	}
	for _, id := range ids {
		c.byID[id] = st
	}
	for _, tok := range tokens {
		c.byToken[tok] = st
	}
	c.last = st
	return st
}

// cancelled stops waiting for a request's answer; its stream ends after the
// grace if it carries nothing else.
func (c *childSession) cancelled(id framing.ID, grace time.Duration) {
	c.mu.Lock()
	st := c.byID[id]
	delete(c.byID, id)
	c.mu.Unlock()
	if st == nil {
		return
	}
	st.mu.Lock()
	st.pending--
	last := st.pending <= 0
	st.mu.Unlock()
	if last {
		time.AfterFunc(grace, st.close)
	}
}

// StopAll ends every session: each child's stdin closes and the stop ladder
// follows; it returns once every child has exited.
func (cs *Children) StopAll() {
	cs.mu.Lock()
	all := make([]*childSession, 0, len(cs.sessions))
	for _, c := range cs.sessions {
		all = append(all, c)
	}
	cs.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.in.Close()
			c.proc.Stop()
		}()
	}
	wg.Wait()
}

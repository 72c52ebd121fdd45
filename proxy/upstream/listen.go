package upstream

import (
	"context"
	"io"
	"sync/atomic"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
)

// Listen implements Conn: its Stream waits for initialize's answer, then
// opens the session's GET stream, if the upstream offers one, and hands
// out its messages. The client's frame after that answer waits for the
// GET's headers (StreamWait). A session the Conn never initializes, or
// one whose upstream has no such stream, ends it at once.
func (c *StreamConn) Listen(context.Context) (Stream, error) {
	if c.stopped() {
		return nil, errConnClosed
	}
	c.listening.Store(true)
	return &listenStream{c: c}, nil
}

// listenStream is the session's GET stream, an answer without a request.
type listenStream struct {
	c      *StreamConn
	a      atomic.Pointer[answer] // the GET's, once opened
	closed atomic.Bool
	done   bool // Next's
}

// Next implements Stream.
func (l *listenStream) Next() ([]byte, error) {
	a := l.a.Load()
	if a == nil {
		if l.done || !l.open() {
			l.done = true
			return nil, io.EOF
		}
		a = l.a.Load()
	}
	return a.Next()
}

// open waits for initialize's answer and GETs the session's stream,
// telling the frame that waits (opening) once its headers have come, the
// GET has failed, or StreamWait has passed. It reports whether there is a
// stream to read.
func (l *listenStream) open() bool {
	c := l.c
	<-c.initDone
	opening := c.opening.Load()
	if opening == nil || c.stopped() || l.closed.Load() {
		return false
	}
	c.mu.Lock()
	session := c.session
	c.mu.Unlock()
	t := clock.Or(c.u.Clock).AfterFunc(StreamWait, opening.Headed)
	resp, err := c.request(Request{Method: fasthttp.MethodGet, Session: session}, 0)
	t.Stop()
	opening.Headed()
	switch {
	case err != nil:
		return false
	case resp.StatusCode() != fasthttp.StatusOK || !IsEventStream(resp.Header.ContentType()):
		ReadHead(resp) // the upstream has no stream for other traffic
		return false
	}
	a := &answer{c: c, begun: true}
	a.o.flight = &a.o.fl
	l.a.Store(a)
	if l.closed.Load() {
		a.closed.Store(true)
	}
	a.read(resp, BodyOf(resp))
	return a.rd != nil // else closed meanwhile
}

// Close implements Stream: Close of the Conn ends it; this ends it
// earlier.
func (l *listenStream) Close() error {
	l.closed.Store(true)
	if a := l.a.Load(); a != nil {
		a.Close()
	}
	return nil
}

// resume asks the upstream to resume the session's stream after the event
// last (a GET with Last-Event-ID), and returns its response, or nil when
// the upstream does not resume it.
func (c *StreamConn) resume(last string) *fasthttp.Response {
	c.mu.Lock()
	session := c.session
	c.mu.Unlock()
	resp, err := c.request(Request{Method: fasthttp.MethodGet, Session: session, LastEventID: last}, 0)
	if err != nil {
		c.log.Warn("resuming a request's stream failed", zap.String("error", Brief(err)))
		return nil
	}
	if resp.StatusCode() != fasthttp.StatusOK || !IsEventStream(resp.Header.ContentType()) {
		c.log.Warn("the upstream did not resume a request's stream", zap.Int("status", resp.StatusCode()))
		ReadHead(resp) // and releases it
		return nil
	}
	return resp
}

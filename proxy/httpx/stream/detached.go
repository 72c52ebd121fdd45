package stream

import (
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/owned"
)

// Detached serves a front's long-lived response streams (a session's GET
// stream, which may stay silent for hours) off fasthttp's connection loop.
// fasthttp writes a response body on the worker goroutine that ran the
// handler, whose stack the handler's work (the upstream's request, the
// logs) has grown to 16 KiB, and it holds its write buffer meanwhile; an
// idle stream held both. A detached stream instead has fasthttp hand its
// connection over once the handler returns (a hijack): the worker and its
// buffer go back to their pools, and the stream is written on the
// connection as chunks by a goroutine that starts shallow and stays small
// (docs/performance.md has the figures). fasthttp cannot take the
// connection back, so it closes at the stream's end, as the head says.
//
// A front owns its Detached: fasthttp's Shutdown no longer counts these
// connections, so Stop, in the front's Cleanup, ends the streams still
// written and waits for them. The zero Detached is ready.
type Detached struct {
	// KeepsConns says that the server keeps hijacked connections open
	// (fasthttp.Server.KeepHijackedConns): a stream is then written by a
	// goroutine of d's own, and fasthttp's request context, which its
	// hijack holds until it returns, goes back to its pool at once. Set
	// before the first Serve.
	KeepsConns bool

	mu      sync.Mutex
	open    map[*detached]struct{}
	stopped bool
	g       owned.Group
}

// Body is a detached stream's body: WriteTo writes its events, each in
// one Write, until the stream ends (nil) or a write fails; Close is called
// once, after.
type Body interface {
	io.WriterTo
	io.Closer
}

// detached is one stream Detached serves.
type detached struct {
	body    Body
	end     func()
	started bool // guarded by Detached.mu
}

// Serve has body written as ctx's response once the handler returns, on
// the connection fasthttp hands over, with ctx's response headers as they
// are then (so that what the handler's callers add, CORS, goes too); end,
// called by Stop, ends body early. It reports false, having done nothing,
// when the stream cannot be detached: the client speaks HTTP/1.0, which
// has no chunks, or d has stopped. The caller then serves body as usual.
func (d *Detached) Serve(ctx *fasthttp.RequestCtx, body Body, end func()) bool {
	if !ctx.Request.Header.IsHTTP11() {
		return false
	}
	e := &detached{body: body, end: end}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return false
	}
	if d.open == nil {
		d.open = make(map[*detached]struct{})
	}
	d.open[e] = struct{}{}
	d.g.Add()
	// fasthttp runs the hijack on a goroutine of its own unless the
	// connection already failed on its side (a deadline it cannot set):
	// then Stop closes the body it never wrote.
	ctx.HijackSetNoResponse(true)
	ctx.Hijack(func(c net.Conn) { d.run(e, &ctx.Response.Header, c) })
	return true
}

// run writes e on c, from the hijack, or from a goroutine of d's own
// when the server keeps c open once the hijack returns.
func (d *Detached) run(e *detached, h *fasthttp.ResponseHeader, c net.Conn) {
	if !d.claim(e) {
		return // Stop took it first, and closed it
	}
	h.SetContentLength(-1)
	h.SetConnectionClose()
	head := h.AppendBytes(nil)
	if !d.KeepsConns {
		d.write(e, head, c, false) // fasthttp closes c once run returns
		return
	}
	go d.write(e, head, c, true)
}

// write writes e's head and body on c, and ends it; and c, if it owns c.
func (d *Detached) write(e *detached, head []byte, c net.Conn, owns bool) {
	defer d.done(e)
	if owns {
		defer c.Close()
	}
	defer e.body.Close()
	if _, err := c.Write(head); err != nil {
		return
	}
	if _, err := e.body.WriteTo(chunks{c}); err == nil {
		c.Write(lastChunk)
	}
}

// lastChunk ends a chunked body, with no trailer.
var lastChunk = []byte("0\r\n\r\n")

func (d *Detached) done(e *detached) {
	d.mu.Lock()
	delete(d.open, e)
	d.mu.Unlock()
	d.g.Done()
}

// Stop ends every stream still served, and refuses new ones; it waits up
// to wait for them to write their end, and reports whether they all did,
// or how many did not.
func (d *Detached) Stop(wait time.Duration) (bool, int) {
	d.mu.Lock()
	d.stopped = true
	open := slices.Collect(maps.Keys(d.open))
	d.mu.Unlock()
	for _, e := range open {
		e.end()
		// A stream whose hijack never ran (see Serve), or has not yet,
		// is closed here, and the hijack, if it runs, writes nothing.
		if d.claim(e) {
			e.body.Close()
			d.done(e)
		}
	}
	return d.g.Wait(wait)
}

// claim takes e for whoever writes or closes its body, the hijack or
// Stop: it reports false to the second.
func (d *Detached) claim(e *detached) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e.started {
		return false
	}
	e.started = true
	return true
}

// chunks writes each Write as one HTTP/1.1 chunk, in one write to c.
type chunks struct{ c net.Conn }

// chunkPool holds the buffers a chunk is framed in, while it is written:
// an idle stream holds none.
var chunkPool = sync.Pool{New: func() any { return new([]byte) }}

// maxPooled bounds the chunk buffers kept in the pool; a larger event is
// framed in a buffer of its own.
const maxPooled = 64 << 10

func (w chunks) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil // an empty chunk would end the body
	}
	bp := chunkPool.Get().(*[]byte)
	b := strconv.AppendInt((*bp)[:0], int64(len(p)), 16)
	b = append(append(append(b, '\r', '\n'), p...), '\r', '\n')
	_, err := w.c.Write(b)
	if cap(b) <= maxPooled {
		*bp = b[:0]
		chunkPool.Put(bp)
	}
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

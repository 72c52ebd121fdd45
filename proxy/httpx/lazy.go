package httpx

import (
	"errors"
	"io"
	"sync"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
)

// lazyBackend starts (or dials) its server at the first line its session
// sends it: an old client's GET /sse opens a session, but only the
// client's first POST starts a server for it. 64 event streams that never
// POSTed started 64 servers (4.5 GB) before.
type lazyBackend struct {
	dial func() (Backend, error)

	mu      sync.Mutex    // guards the fields below
	back    Backend       // once started
	conn    stdio.Conn    // back's
	err     error         // the start's failure
	stopped bool          // Stop came first: no server is ever started
	ready   chan struct{} // closed once started, failed or stopped
	// exited is closed once no server runs and none will: the start
	// failed, or Stop came (first, or after a start once the server's
	// Stop returned); after a start, Exited is the server's own.
	exited   chan struct{}
	exitOnce sync.Once
}

func newLazyBackend(dial func() (Backend, error)) *lazyBackend {
	return &lazyBackend{dial: dial, ready: make(chan struct{}), exited: make(chan struct{})}
}

// errNotStarted is the session's write after a Stop that came before any
// server was started.
var errNotStarted = errors.New("the session ended before its server was started")

// start starts the server, once.
func (l *lazyBackend) start() (stdio.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.back != nil:
		return l.conn, nil
	case l.err != nil:
		return stdio.Conn{}, l.err
	case l.stopped:
		return stdio.Conn{}, errNotStarted
	}
	back, err := l.dial()
	if err != nil {
		l.err = err
		close(l.ready)
		l.exitOnce.Do(func() { close(l.exited) })
		return stdio.Conn{}, err
	}
	l.back, l.conn = back, back.Conn()
	close(l.ready)
	return l.conn, nil
}

// Conn implements Backend: reading waits for the server's start, and the
// first write starts it.
func (l *lazyBackend) Conn() stdio.Conn { return stdio.Conn{In: lazyIn{l}, Out: lazyOut{l}} }

// Stop implements Backend: it stops the server if one was started, and
// else makes sure none ever is.
func (l *lazyBackend) Stop() {
	l.mu.Lock()
	back := l.back
	if back == nil && !l.stopped && l.err == nil {
		l.stopped = true
		close(l.ready)
	}
	l.mu.Unlock()
	if back != nil {
		back.Stop()
	}
	l.exitOnce.Do(func() { close(l.exited) })
}

// Exited implements Backend: the server's once it was started, else a
// channel closed once none runs or will (see exited).
func (l *lazyBackend) Exited() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.back != nil {
		return l.back.Exited()
	}
	return l.exited
}

// started returns the server's conn once it was started, or ok false if
// none was and none will be.
func (l *lazyBackend) started() (stdio.Conn, bool) {
	<-l.ready
	return l.now()
}

// now returns the server's conn if it was started, without waiting.
func (l *lazyBackend) now() (stdio.Conn, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conn, l.back != nil
}

// lazyIn is the server's lines: none until it is started.
type lazyIn struct{ l *lazyBackend }

func (r lazyIn) Read(p []byte) (int, error) {
	conn, ok := r.l.started()
	if !ok {
		return 0, io.EOF
	}
	return conn.In.Read(p)
}

func (r lazyIn) Close() error {
	if conn, started := r.l.now(); started {
		return conn.In.Close()
	}
	r.l.Stop() // a reader waiting for a start that will never come
	return nil
}

// lazyOut takes the session's lines, starting the server with the first.
type lazyOut struct{ l *lazyBackend }

func (w lazyOut) Write(p []byte) (int, error) {
	conn, err := w.l.start()
	if err != nil {
		return 0, err
	}
	return conn.Out.Write(p)
}

// SendFrame implements stdio.Sender: a server that takes messages gets
// them so, one that takes bytes a line.
func (w lazyOut) SendFrame(frame []byte, opens *proxy.Call, m *framing.Message) {
	w.send(frame, func(s stdio.Sender) { s.SendFrame(frame, opens, m) })
}

// SendCancel implements stdio.Sender.
func (w lazyOut) SendCancel(c *proxy.Call, notice []byte) {
	w.send(notice, func(s stdio.Sender) { s.SendCancel(c, notice) })
}

// send starts the server, and hands it frame as a message (by call) if it
// takes messages, else as a line.
func (w lazyOut) send(frame []byte, call func(stdio.Sender)) {
	conn, err := w.l.start()
	if err != nil {
		return
	}
	if s, ok := conn.Out.(stdio.Sender); ok {
		call(s)
		return
	}
	conn.Out.Write(append(frame[:len(frame):len(frame)], '\n'))
}

func (w lazyOut) Close() error {
	if conn, started := w.l.now(); started {
		return conn.Out.Close()
	}
	return nil
}

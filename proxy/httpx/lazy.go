package httpx

import (
	"errors"
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
	dial func() (stdio.Backend, error)

	mu      sync.Mutex    // guards the fields below
	back    stdio.Backend // once started
	conn    stdio.Conn    // back's
	err     error         // the start's failure
	stopped bool          // Stop came first: no server is ever started
	// to is the session's (PushTo): the server pushes it its frames once
	// started.
	to stdio.Receiver
	// exited is closed once no server runs and none will: the start
	// failed, or Stop came (first, or after a start once the server's
	// Stop returned); after a start, Exited is the server's own.
	exited   chan struct{}
	exitOnce sync.Once
}

func newLazyBackend(dial func() (stdio.Backend, error)) *lazyBackend {
	return &lazyBackend{dial: dial, exited: make(chan struct{})}
}

// errNotStarted is the session's write after a Stop that came before any
// server was started.
var errNotStarted = errors.New("the session ended before its server was started")

// start starts the server, once, and hands its frames to the session if
// it asked already (PushTo).
func (l *lazyBackend) start() (stdio.Conn, error) {
	conn, to, err := l.startLocked()
	if to != nil { // after the lock: the session may answer the server at once
		conn.Push.PushTo(to) // every server a Dialer reaches pushes them (stdio.Lines)
	}
	return conn, err
}

// startLocked is start's part under the lock; it returns the session's
// Receiver when the frames of a server it started are to be handed to it.
func (l *lazyBackend) startLocked() (stdio.Conn, stdio.Receiver, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.back != nil:
		return l.conn, nil, nil
	case l.err != nil:
		return stdio.Conn{}, nil, l.err
	case l.stopped:
		return stdio.Conn{}, nil, errNotStarted
	}
	back, err := l.dial()
	if err != nil {
		l.err = err
		if l.to != nil {
			l.to.End()
		}
		l.exitOnce.Do(func() { close(l.exited) })
		return stdio.Conn{}, nil, err
	}
	l.back, l.conn = back, back.Conn()
	return l.conn, l.to, nil
}

// PushTo implements stdio.Pusher: the session gets the server's frames
// once it is started, and its End at once if none ever will be.
func (l *lazyBackend) PushTo(r stdio.Receiver) {
	l.mu.Lock()
	l.to = r
	started, conn, over := l.back != nil, l.conn, l.err != nil || l.stopped
	l.mu.Unlock()
	switch {
	case started:
		conn.Push.PushTo(r)
	case over:
		r.End()
	}
}

// Conn implements stdio.Backend: the first write starts the server, whose
// frames are then the session's (PushTo).
func (l *lazyBackend) Conn() stdio.Conn { return stdio.Conn{Out: lazyOut{l}, Push: l} }

// Stop implements stdio.Backend: it stops the server if one was started, and
// else makes sure none ever is.
func (l *lazyBackend) Stop() {
	l.mu.Lock()
	back := l.back
	if back == nil && !l.stopped && l.err == nil {
		l.stopped = true
		if l.to != nil {
			l.to.End() // no server, no frames
		}
	}
	l.mu.Unlock()
	if back != nil {
		back.Stop()
	}
	l.exitOnce.Do(func() { close(l.exited) })
}

// Exited implements stdio.Backend: the server's once it was started, else a
// channel closed once none runs or will (see exited).
func (l *lazyBackend) Exited() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.back != nil {
		return l.back.Exited()
	}
	return l.exited
}

// now returns the server's conn if it was started, without waiting.
func (l *lazyBackend) now() (stdio.Conn, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conn, l.back != nil
}

// lazyOut takes the session's frames, starting the server with the first.
type lazyOut struct{ l *lazyBackend }

// Write implements io.Writer, which a session's Out must: a session hands
// a Sender its frames (SendFrame), never bytes.
func (w lazyOut) Write([]byte) (int, error) { return 0, errNoBytes }

var errNoBytes = errors.New("a session of lines sends its server messages, not bytes")

// SendFrame implements stdio.Sender.
func (w lazyOut) SendFrame(frame []byte, opens *proxy.Call, m *framing.Message) {
	if s, ok := w.started(); ok {
		s.SendFrame(frame, opens, m)
	}
}

// SendCancel implements stdio.Sender.
func (w lazyOut) SendCancel(c *proxy.Call, notice []byte) {
	if s, ok := w.started(); ok {
		s.SendCancel(c, notice)
	}
}

// started starts the server, and returns its way in.
func (w lazyOut) started() (stdio.Sender, bool) {
	conn, err := w.l.start()
	if err != nil {
		return nil, false
	}
	s, ok := conn.Out.(stdio.Sender)
	return s, ok
}

func (w lazyOut) Close() error {
	if conn, started := w.l.now(); started {
		return conn.Out.Close()
	}
	return nil
}

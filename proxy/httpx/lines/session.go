// Package lines runs a client session of an HTTP front whose server
// speaks in lines (a stdio child, an HTTP+SSE upstream's session, a
// Streamable HTTP upstream reached as a client): a stdio.Session between
// the front, which submits the client's messages (stdio.Session.Submit)
// and takes what the session sends the client (stdio.Options.Deliver),
// and the session's Backend, so that
// cancellation is the stdio relay's, exactly. Both fronts of that kind
// (Streamable HTTP clients, old HTTP+SSE ones) start, feed and stop their
// sessions here.
package lines

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/owned"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// Session is one client session of lines.
type Session struct {
	// ID is the session's id, which names it to the client.
	ID string
	// Sess decides each message: the front submits the client's (Submit),
	// and takes what it sends the client (its Options' Deliver).
	Sess *stdio.Session
	// Log is the session's logger.
	Log  *zap.Logger
	done chan struct{} // closed once the session has ended
	// cancelling owns Stop's CancelAll; the session's end waits for it.
	cancelling owned.Group
	// grace bounds the waits of Stop for a server that does not read.
	grace time.Duration

	mu   sync.Mutex    // guards the fields below; held while Connect dials
	back stdio.Backend // the session's server: New's, or Connect's
	// ended and onEnd are Start's; over says the session ended before it
	// had a server (Stop or CloseClient first).
	ended, onEnd func()
	over         bool
}

// New makes a session between a front and back, to Start; with back nil,
// the server is dialled at Connect (an old client's, at its first message).
// grace is the server's term_after, or zero for the default; totals, the
// front's counters, get the session's counts.
func New(back stdio.Backend, sopts stdio.Options, grace time.Duration, totals *proxy.Counters, log *zap.Logger) *Session {
	ls := &Session{ID: newID(), back: back, Log: log, done: make(chan struct{}), grace: cmp.Or(grace, upstream.DefaultGrace)}
	sopts.Logger = log
	sopts.Totals = totals
	sopts.OnClientClosed = func() { go ls.server().Stop() } // not on the relay: a process's Stop waits for its exit, as Start's does
	sopts.DrainWait = cmp.Or(sopts.DrainWait, grace)
	ls.Sess = stdio.NewSession(sopts)
	return ls
}

// Start starts the session, with no goroutine of its own while it lasts
// (stdio.Session.Start), at once if it has its server, else at Connect. Once
// the server's side has ended, every message for the client delivered,
// ended runs (the front ends the client's streams); once the client's
// side has ended too and the server is stopped, onEnd, if not nil, runs,
// and Done is closed: the session's goroutines have all ended. A session
// that ends before it had a server runs both at once (here, if it ended
// before Start).
func (ls *Session) Start(ended, onEnd func()) {
	ls.mu.Lock()
	ls.ended, ls.onEnd = ended, onEnd
	over := ls.over
	if ls.back != nil {
		ls.run(ls.back)
	}
	ls.mu.Unlock()
	if over { // stopped before it started (evicted as it was added)
		ended()
		if onEnd != nil {
			onEnd()
		}
	}
}

// Connect gives a session that New made without a server its server, once:
// dial's. It reports ErrEnded if the session has ended, or dial's error
// (the session is then still without a server: its caller answers for
// what it had for it, and ends it, CloseClient).
func (ls *Session) Connect(dial func() (stdio.Backend, error)) error {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	switch {
	case ls.back != nil:
		return nil
	case ls.over:
		return ErrEnded
	}
	back, err := dial()
	if err != nil {
		return err
	}
	ls.back = back
	ls.run(back)
	return nil
}

// ErrEnded is Connect's error for a session that has ended.
var ErrEnded = errors.New("the session has ended")

// run starts the session over back; ls.mu is held.
func (ls *Session) run(back stdio.Backend) {
	ended, onEnd := ls.ended, ls.onEnd
	ls.Sess.Start(back.Conn(), func(error) { // the client's side is Submit's and Deliver's
		defer close(ls.done)
		ended()
		<-ls.Sess.ReaderDone()
		back.Stop()
		ls.cancelling.Wait(ls.grace)
		if onEnd != nil {
			onEnd()
		}
	})
}

// server returns the session's server; the session has one (it was
// started).
func (ls *Session) server() stdio.Backend {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.back
}

// Exited is closed once the session's server has ended; the session has
// one (New's).
func (ls *Session) Exited() <-chan struct{} { return ls.server().Exited() }

// endUnstarted ends a session that has no server yet, once, and reports
// true; or reports false if it has one (it ends as started sessions do).
// Nothing was relayed; its end runs outside the lock (ended and onEnd
// may call back into the front, which may call the session).
func (ls *Session) endUnstarted() bool {
	ls.mu.Lock()
	if ls.back != nil {
		ls.mu.Unlock()
		return false
	}
	first := !ls.over
	ls.over = true
	ended, onEnd := ls.ended, ls.onEnd
	ls.mu.Unlock()
	if first {
		ls.Sess.Abandon()
		if ended != nil {
			ended()
		}
		if onEnd != nil {
			onEnd()
		}
		close(ls.done)
	}
	return true
}

// CloseClient ends the client's side: nothing more is submitted, and the
// session ends once the server has what was queued for it (at once if it
// has no server).
func (ls *Session) CloseClient() {
	if !ls.endUnstarted() {
		ls.Sess.CloseClient()
	}
}

// Done is closed once the session has ended.
func (ls *Session) Done() <-chan struct{} { return ls.done }

// Stats returns the session's counters.
func (ls *Session) Stats() proxy.Stats { return ls.Sess.Stats() }

// InFlight counts the client's requests in flight.
func (ls *Session) InFlight() int {
	n, _ := ls.Sess.InFlight()
	return n
}

// Stop ends the session: its requests in flight are cancelled first (on
// the server, with their hooks and audit, as from source; the client gets
// an error for each), then the client's side closes, and the backend stops
// once the session has written what it holds. It returns within two graces
// whatever the server does.
func (ls *Session) Stop(source proxy.Source, reason string) {
	if ls.endUnstarted() {
		return
	}
	done := make(chan struct{})
	ls.cancelling.Go(func() { ls.Sess.CancelAll(source, reason); close(done) })
	grace := time.NewTimer(ls.grace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C: // the relay is held back by a server that does not read its stdin
	}
	ls.Sess.CloseClient()
	// The session stops the backend once it has written what it holds; a
	// server that does not read would hold it for ever, so the backend's
	// stop (a process's ladder) starts after the grace regardless.
	time.AfterFunc(ls.grace, ls.server().Stop)
}

// StopAndWait stops the session and waits until it has ended.
func (ls *Session) StopAndWait(source proxy.Source, reason string) {
	ls.Stop(source, reason)
	<-ls.done
}

// newID returns a fresh session id: 128 random bits, in hex.
func newID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

package httpx

import (
	"cmp"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/child"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/sessiontable"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
)

// lineSession is one client session of an HTTP front that speaks to its
// server in lines (a stdio child, an HTTP+SSE upstream's session, a
// Streamable HTTP upstream reached as a client): a stdio.Session between
// the front, which writes the client's lines to in and reads what the
// session sends the client from out, and the session's Backend. Both fronts
// of that kind (Children for Streamable HTTP clients, Legacy for HTTP+SSE
// ones) start, feed and stop their sessions here, so that cancellation is
// the stdio relay's, exactly.
type lineSession struct {
	sessiontable.Usage // when the session last saw a request
	id                 string
	back               Backend
	sess               *stdio.Session
	in                 *stdio.Frames // the client's messages toward the session
	out                *stdio.Frames // what the session sends the client
	log                *zap.Logger
	done               chan struct{} // closed once the session has ended
	// cancelling owns stop's CancelAll; the session's end waits for it.
	cancelling goGroup
	// grace bounds the waits of stop for a server that does not read.
	grace time.Duration
}

// newLineSession makes a session between a front and back, to start;
// grace is the server's term_after, or zero for the default; totals, the
// front's counters, get the session's counts.
func newLineSession(back Backend, sopts stdio.Options, grace time.Duration, totals *proxy.Counters, log *zap.Logger) *lineSession {
	sopts.Logger = log
	sopts.Totals = totals
	sopts.OnClientClosed = func() { go back.Stop() }
	sopts.DrainWait = cmp.Or(sopts.DrainWait, grace)
	return &lineSession{id: newSessionID(), back: back, sess: stdio.NewSession(sopts), in: stdio.NewFrames(),
		out: stdio.NewFrames(), log: log, done: make(chan struct{}), grace: cmp.Or(grace, child.DefaultTermAfter)}
}

// start runs the session, and route beside it: route reads what the
// session sends the client (out) until it ends, which it does once the
// session has. Then onEnd, if not nil, runs, and done is closed: the
// session's goroutines have all ended.
func (ls *lineSession) start(route, onEnd func()) {
	go func() {
		defer close(ls.done)
		routed := make(chan struct{})
		go func() {
			defer close(routed)
			route()
		}()
		ls.sess.Run(stdio.Conn{In: ls.in, Out: stdio.WriteEnd{Frames: ls.out}}, ls.back.Conn())
		<-ls.sess.ReaderDone() // in is ours: closing it ended the reader
		ls.back.Stop()
		<-routed // out ended with Run
		ls.cancelling.wait(ls.grace)
		if onEnd != nil {
			onEnd()
		}
	}()
}

// stats returns the session's counters.
func (ls *lineSession) Stats() proxy.Stats { return ls.sess.Stats() }

// inFlight counts the client's requests in flight.
func (ls *lineSession) InFlight() int {
	n, _ := ls.sess.InFlight()
	return n
}

// send hands the session one message of the client's, one line without
// its newline, which the session now owns.
func (ls *lineSession) send(line []byte) error { return ls.in.Put(line) }

// stop ends the session: its requests in flight are cancelled first (on
// the server, with their hooks and audit, as from source; the client gets
// an error for each), then the client's side closes, and the backend stops
// once the session has written what it holds. It returns within two graces
// whatever the server does.
func (ls *lineSession) stop(source proxy.Source, reason string) {
	done := make(chan struct{})
	ls.cancelling.Go(func() { ls.sess.CancelAll(source, reason); close(done) })
	grace := time.NewTimer(ls.grace)
	defer grace.Stop()
	select {
	case <-done:
	case <-grace.C: // the relay is held back by a server that does not read its stdin
	}
	ls.in.CloseWrite()
	// The session stops the backend once it has written what it holds; a
	// server that does not read would hold it for ever, so the backend's
	// stop (a process's ladder) starts after the grace regardless.
	time.AfterFunc(ls.grace, ls.back.Stop)
}

// stopAndWait stops the session and waits until it has ended.
func (ls *lineSession) stopAndWait(source proxy.Source, reason string) {
	ls.stop(source, reason)
	<-ls.done
}

package httpx

import (
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/demux"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/lines"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/sessiontable"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/stream"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/mcpheader"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// Children serves Streamable HTTP clients in sessions of lines: each
// session that initialize opens gets its own server from Dial (a stdio
// server's process, a session of an HTTP+SSE upstream), and a
// stdio.Session between it and the HTTP side, so cancellation works
// exactly as in the stdio wrapper. This side only routes: each POST's
// frame goes to the session (stdio.Session.Submit), and what the session
// sends back goes to the response stream of the request its core says it
// is about (stdio.Options.Deliver), or to the GET stream.
type Children struct {
	// Dial reaches each session's server: a stdio server's command
	// (upstream.Command), or a test's. Without one, each session is one of
	// the Sidecar's Upstream, an HTTP+SSE server.
	Dial upstream.Dialer
	// Session configures each session; its OnClientClosed is the sidecar's.
	Session stdio.Options
	// (How many sessions at once, how long one may idle, and the clock are
	// the Sidecar's: MaxSessions, SessionIdle, Clock.)

	sessions sessiontable.Table[*childSession] // set up by the Sidecar's Provision
	// dial is Dial, or else the Sidecar's HTTP+SSE upstream (set by its
	// Provision).
	dial     upstream.Dialer
	mu       sync.Mutex      // guards shared; held while a session starts
	shared   *childSession   // serves every sessionless request
	retiring sync.WaitGroup  // the sessions idle or evicted, stopping
	totals   *proxy.Counters // the Sidecar's, set by its Provision (kind)
	// tools is what the servers' tools/list answers said of their tools'
	// mirrored parameters: a 2026-07-28 tools/call's Mcp-Param-* headers
	// are checked against them (refuseMismatch).
	tools mcpheader.Tools
}

func (cs *Children) provision(idle time.Duration, most int, clk clock.Clock, totals *proxy.Counters) {
	cs.sessions.Init(idle, most, clk)
	cs.totals = totals
}

func (cs *Children) table() table { return &cs.sessions }

// inFlight counts the requests in flight in the sessions, and on the child
// shared by sessionless requests.
func (cs *Children) InFlight() int {
	n := cs.sessions.InFlight()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.shared != nil {
		n += cs.shared.InFlight()
	}
	return n
}

func (cs *Children) clock() clock.Clock { return cs.sessions.Clock() }

// childSession is one session's server and the routes of what it sends
// to the client's HTTP streams (package demux).
type childSession struct {
	*lines.Session
	sessiontable.Usage // when the session last saw a request
	demux.Router[*stream.Events]
	clock    clock.Clock      // the Children's
	retiring *sync.WaitGroup  // the Children's: counts the session while it stops, once retired
	tools    *mcpheader.Tools // the Children's: learns from tools/list answers
	ended    atomic.Bool      // set once the session has ended, before it is forgotten
}

// start opens a session: the child, the stdio.Session and its router.
// A peer says the session is that client's own (initialize opened it);
// "" that it is the child shared by sessionless requests, each of whose
// frames names its client (Submit). Either way the policy may keep a
// client's cancel back (reissue: join), as over stdio: in a client's own
// session a re-issue joined there is that client's own; on the shared
// child it joins only a call of the same credential (its principal).
func (cs *Children) start(log *zap.Logger, peer string) (*childSession, error) {
	conn, err := cs.dial.Dial(log)
	if err != nil {
		return nil, err
	}
	sopts := cs.Session
	sopts.DeferCancels = true
	sopts.AllowSharedIDs = true // each request's answer goes to its own stream: claude.ai's ids 1 are kept apart
	sopts.Peer = func(*proxy.Call) string { return peer }
	if peer == "" {
		sopts.Principal = sharedPrincipal
	}
	c := &childSession{clock: cs.clock(), retiring: &cs.retiring, tools: &cs.tools}
	sopts.Deliver = c.deliver
	c.Session = lines.New(stdio.NewLines(conn), sopts, cs.grace(), cs.totals, log)
	clk := c.clock
	c.New = func(n int) *stream.Events { return stream.NewEvents(clk, n) }
	c.Start(c.End, func() { // every stream ends with the session, which is then forgotten
		c.ended.Store(true)
		cs.sessions.RemoveIf(c.ID, c)
	})
	return c, nil
}

// sharedPrincipal marks the shared child's session as several clients':
// each request's principal is the one its POST gave Submit.
func sharedPrincipal(*proxy.Call) (string, bool) { return "", true }

// grace is how long a session's end allows its server (upstream.Graced).
func (cs *Children) grace() time.Duration { return graceOf(cs.dial) }

// graceOf is d's servers' grace: their own, or upstream.DefaultGrace.
func graceOf(d upstream.Dialer) time.Duration {
	if g, ok := d.(upstream.Graced); ok {
		return g.Grace()
	}
	return upstream.DefaultGrace
}

// starts returns the command that starts the sessions' servers, if
// they are processes (a stdio server's), which need no upstream.
func (cs *Children) starts() (*upstream.Command, bool) {
	c, ok := cs.Dial.(*upstream.Command)
	return c, ok
}

// runsCommand reports whether the sessions' servers are processes.
func (cs *Children) runsCommand() bool {
	_, ok := cs.starts()
	return ok
}

// deliver routes what the session sends the client to the HTTP streams
// (stdio.Options.Deliver).
func (c *childSession) deliver(frame []byte, about *proxy.Call, last bool) {
	if last && about != nil && about.Method() == "tools/list" {
		c.tools.Learn(frame) // what is checked; the client leaves invalid tools out itself
	}
	switch c.Deliver(frame, about, last) {
	case demux.NoRoute:
		c.Log.Debug("message for the client dropped: no stream is open", zap.Int("bytes", len(frame)))
	case demux.Dropped:
		c.Log.Warn("a client that does not read its stream loses server messages beyond the backlog (answers are kept)",
			zap.Int("backlog_bytes", stream.Backlog))
	}
}

package httpx

import (
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/child"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/demux"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/lines"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/sessiontable"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/stream"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// Children serves a stdio MCP server over Streamable HTTP (protocol
// 2025-03-26 to 2025-11-25, with sessions): each session that initialize
// opens gets its own child process, and a stdio.Session between the child
// and the HTTP side, so cancellation works exactly as in the stdio wrapper.
// This side only routes: each POST's messages go to the session as lines,
// and what the session sends back goes to the response stream of the
// request it answers (by id, or by progress token), or to the GET stream.
type Children struct {
	// Argv is the server command. Required, unless Dial is set.
	Argv []string
	// Dial, when set, reaches each session's server in place of starting
	// Argv: an HTTP+SSE upstream (DialSSE).
	Dial func(log *zap.Logger) (Backend, error)
	// Child configures each child's stop ladder and stderr.
	Child child.Options
	// Session configures each session; its OnClientClosed is the sidecar's.
	Session stdio.Options
	// (How many sessions at once, how long one may idle, and the clock are
	// the Sidecar's: MaxSessions, SessionIdle, Clock.)

	sessions sessiontable.Table[*childSession] // set up by the Sidecar's Provision
	mu       sync.Mutex                        // guards shared; held while a session starts
	shared   *childSession                     // serves every sessionless request
	running  atomic.Int64                      // stdio processes started and not yet ended
	// principals holds, by the id it is sent under, the principal of each
	// request on the shared child until it is decided (principalOf).
	principals sync.Map
	retiring   sync.WaitGroup  // the sessions idle or evicted, stopping
	totals     *proxy.Counters // the Sidecar's, set by its Provision (kind)
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

// Backend is one session's server as a session of lines talks to it (see
// upstream.Backend): a stdio child, or an HTTP upstream reached as a client.
type Backend = upstream.Backend

// childSession is one session's server and the routes of what it sends
// to the client's HTTP streams (package demux).
type childSession struct {
	*lines.Session
	sessiontable.Usage // when the session last saw a request
	demux.Router[*stream.Events]
	clock    clock.Clock     // the Children's
	retiring *sync.WaitGroup // the Children's: counts the session while it stops, once retired
}

// start opens a session: the child, the stdio.Session and its router.
// own says the session is one client's (initialize opened it), not the
// child shared by sessionless requests. Either way the policy may keep a
// client's cancel back (reissue: join), as over stdio: in a client's own
// session a re-issue joined there is that client's own; on the shared
// child it joins only a call of the same credential (its principal).
func (cs *Children) start(log *zap.Logger, own bool) (*childSession, error) {
	copts := cs.Child
	copts.Logger = log
	proc, err := cs.backend(copts)
	if err != nil {
		return nil, err
	}
	sopts := cs.Session
	sopts.DeferCancels = true
	var c *childSession
	if !own {
		sopts.Principal = cs.principal
		if newTracer := sopts.NewTracer; newTracer != nil {
			// The shared child's requests are renamed: their spans name
			// the client's ids, as the client knows them.
			sopts.NewTracer = func() proxy.Tracer {
				return clientIDs{newTracer(), func(id framing.ID) framing.ID { return c.ClientID(id) }}
			}
		}
	}
	c = &childSession{Session: lines.New(proc, sopts, copts.TermAfter, cs.totals, log), clock: cs.clock(),
		retiring: &cs.retiring}
	clk := c.clock
	c.New = func(ids []framing.ID) *stream.Events {
		st := stream.NewEvents(clk, len(ids))
		st.IDs = ids
		return st
	}
	c.Start(c.route, nil)
	return c, nil
}

// clientIDs is a tracer whose spans of the client's requests name their
// ids as the client sent them, not as the shared child's router renamed
// them.
type clientIDs struct {
	proxy.Tracer
	of func(framing.ID) framing.ID
}

func (t clientIDs) Start(from proxy.Peer, m *framing.Message, parent proxy.TraceContext) proxy.Span {
	if from == proxy.Client && m.ID.IsValid() {
		named := *m
		named.ID = t.of(m.ID)
		m = &named
	}
	return t.Tracer.Start(from, m, parent)
}

// principal returns the principal of a request on the shared child, and
// forgets it: the request is decided.
func (cs *Children) principal(c *proxy.Call) (string, bool) {
	p, _ := cs.principals.LoadAndDelete(c.ID())
	s, _ := p.(string)
	return s, true
}

// backend starts a session's server: dials it, or starts the command.
func (cs *Children) backend(copts child.Options) (Backend, error) {
	if cs.Dial != nil {
		return cs.Dial(copts.Logger)
	}
	back, err := upstream.StartChild(cs.Argv, copts)
	if err != nil {
		return nil, err
	}
	cs.running.Add(1) // counted while the process runs (Count)
	go func() { <-back.Exited(); cs.running.Add(-1) }()
	return back, nil
}

// route delivers what the session sends the client to the HTTP streams.
func (c *childSession) route() {
	var f framing.Frame
	for {
		line, err := c.Out.Next(nil)
		if err != nil {
			c.End()
			return
		}
		var m *framing.Message
		if f.Parse(line) == nil && !f.Batch {
			m = &f.Msgs[0]
		}
		switch c.Deliver(m, line) {
		case demux.NoRoute:
			c.Log.Debug("message for the client dropped: no stream is open", zap.Int("bytes", len(line)))
		case demux.Dropped:
			c.Log.Warn("a client that does not read its stream loses server messages beyond the backlog (answers are kept)",
				zap.Int("backlog_bytes", stream.Backlog))
		}
	}
}

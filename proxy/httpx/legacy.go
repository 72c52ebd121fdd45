package httpx

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/lines"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/sessiontable"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/stream"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// Old clients speak the 2024-11-05 HTTP+SSE transport: GET the SSE
// endpoint, whose first event, endpoint, names the URL to POST messages to;
// every message of the server's comes on that one stream. Such a client is,
// like a stdio client, a stream of lines each way, so each of its sessions
// is a stdio.Session between those lines and a Backend of its own (a stdio
// child, or an HTTP+SSE upstream's session): its cancels, the server's late
// answers and progress, and the server's own requests are handled exactly
// as in the stdio wrapper.

// Defaults for Legacy.
const (
	DefaultLegacySSEPath     = "/sse"
	DefaultLegacyMessagePath = "/message"
)

// Legacy configures the HTTP+SSE endpoints served to old clients.
type Legacy struct {
	// SSEPath is the event stream's path. If empty, DefaultLegacySSEPath.
	SSEPath string
	// MessagePath is the path messages are POSTed to, with ?sessionId=.
	// If empty, DefaultLegacyMessagePath.
	MessagePath string
	// Dial, if set, reaches the server of a session when the sidecar
	// relays a Streamable HTTP upstream, in place of a session of the
	// sidecar's Upstream (a test's servers); with Children, theirs are
	// used.
	Dial upstream.Dialer
	// Session configures the sessions of a Streamable HTTP upstream.
	Session stdio.Options
	// (How many sessions at once is the Sidecar's MaxSessions.)
	// InitWait is how long an old client's event stream may stay open
	// without the client POSTing a message: past it, the stream is closed,
	// so that streams that never start a session cannot hold every slot.
	// Any first message ends the wait, whatever its method and era (a
	// 2026-07-28 client sends server/discover first, never initialize).
	// If zero, DefaultLegacyInitWait.
	InitWait time.Duration

	sessions sessiontable.Table[*legacySession] // set up by the Sidecar's Provision
	retiring sync.WaitGroup                     // the sessions the sweep stops
	totals   *proxy.Counters                    // the Sidecar's, set by its Provision
}

// legacySession is one old client's session, as long as its event stream
// is open.
type legacySession struct {
	*lines.Session
	sessiontable.Usage                 // when the session last saw a request
	st                 *stream.Events  // the event stream
	retiring           *sync.WaitGroup // the Legacy's: counts the session while it stops, once retired
	// started is set once the client has POSTed its first message.
	started atomic.Bool
	dial    upstream.Dialer // reaches its server, at its first message (connect)
}

// connect starts (or dials) the session's server, once, at the client's
// first message.
func (ls *legacySession) connect() error {
	err := ls.Connect(func() (stdio.Backend, error) {
		conn, err := ls.dial.Dial(ls.Log)
		if err != nil {
			ls.Log.Error("cannot start the server", zap.Error(err))
			return nil, err
		}
		return stdio.NewLines(conn), nil
	})
	return err
}

// DefaultLegacyInitWait is Legacy.InitWait's default.
const DefaultLegacyInitWait = 10 * time.Second

// busy reports whether the client's event stream is open: an old client's
// session lasts as long as its stream, so it never idles.
func (ls *legacySession) Busy() bool { return !ls.st.Ended() }

// Started reports whether the client has POSTed a message: at a cap, a
// stream that never did is evicted first.
func (ls *legacySession) Started() bool { return ls.started.Load() }

// retire ends a session the sidecar forgot.
func (ls *legacySession) Retire(why string) {
	ls.retiring.Go(func() { ls.StopAndWait(proxy.SourceSessionEnd, "session "+why) })
}

func (l *Legacy) sseRoute() string { return cmp.Or(l.SSEPath, DefaultLegacySSEPath) }
func (l *Legacy) msgRoute() string { return cmp.Or(l.MessagePath, DefaultLegacyMessagePath) }

// serveLegacy serves a request for the legacy endpoints, and reports
// whether it was one.
func (lg legacyFront) serveLegacy(ctx *fasthttp.RequestCtx) bool {
	var serve func(*fasthttp.RequestCtx)
	switch method, path := string(ctx.Method()), string(ctx.Path()); {
	case path == lg.s.Legacy.sseRoute() && method == fasthttp.MethodGet:
		serve = lg.legacyGet
	case path == lg.s.Legacy.msgRoute() && method == fasthttp.MethodPost:
		serve = lg.legacyPost
	case path == lg.s.Legacy.sseRoute() || path == lg.s.Legacy.msgRoute():
		ctx.Error("method not allowed", fasthttp.StatusMethodNotAllowed)
		return true
	default:
		return false
	}
	if lg.s.allowed(ctx) {
		serve(ctx)
	}
	return true
}

// legacyGet opens an old client's session and serves its event stream.
func (lg legacyFront) legacyGet(ctx *fasthttp.RequestCtx) {
	l := lg.s.Legacy
	up := lg.s.target
	full := func() {
		lg.s.log.Warn("session refused: too many HTTP+SSE sessions", zap.Int("sessions", l.sessions.Len()))
		ctx.Error("too many sessions", fasthttp.StatusServiceUnavailable)
	}
	peer := lg.s.peerOf(ctx)
	if !l.sessions.RoomFor(peer) {
		full()
		return
	}
	log := lg.s.log.With(zap.String("session", fmt.Sprintf("s%d", scopes.Add(1))))
	servers := up.lineServers()
	sopts, grace := servers.opts, servers.grace
	// An old client's one event stream carries every answer, as a stdio
	// client's pipe does: the session keeps a cancel the policy defers
	// (reissue: join) as the bridge does, and reads the server's answer on.
	sopts.DeferCancels = true
	ls, err := lg.startLegacy(sopts, grace, peer, log)
	if err != nil { // another session took the room meanwhile
		full()
		return
	}
	st := ls.st
	st.SendEvent(fmt.Appendf(nil, "event: endpoint\ndata: %s?sessionId=%s\n\n", l.msgRoute(), url.QueryEscape(ls.ID)), true)
	st.StopWatch = lg.s.closes.Watch(ctx.Conn(), st.Abort)
	log.Info("HTTP+SSE client session opened", events.Mark(events.LegacySessionOpened))
	stream.ServeDetached(ctx, st, &lg.s.detached)
}

// startLegacy runs a session of peer's between an old client's lines and
// its server, which is started (or dialled) at the client's first POST
// (connect: a stream that never POSTs costs no process), and returns it
// with its event stream; or returns sessiontable.ErrFull if another
// session took the last room meanwhile.
func (lg legacyFront) startLegacy(sopts stdio.Options, grace time.Duration, peer string, log *zap.Logger) (*legacySession, error) {
	l := lg.s.Legacy
	st := stream.NewEvents(lg.s.clock, 1) // pending until the client leaves: onAbort says it did
	// The one event stream carries everything for the client, answers
	// (never dropped) and all, as the session's core decided it.
	sopts.Peer = func(*proxy.Call) string { return peer }
	sopts.Deliver = func(frame []byte, _ *proxy.Call, last bool) {
		if len(frame) > 0 {
			st.Send(frame, last)
		}
	}
	ls := &legacySession{Session: lines.New(nil, sopts, grace, lg.s.Legacy.totals, log), st: st, retiring: &l.retiring,
		dial: lg.s.target.lineServers().dial}
	ls.Owner = peer
	st.OnAbort = func() { ls.CloseClient() }
	if _, err := l.sessions.Add(ls.ID, ls); err != nil {
		ls.Sess.Abandon() // never started
		return nil, err
	}
	uninitialized := lg.s.clock.AfterFunc(cmp.Or(l.InitWait, DefaultLegacyInitWait), func() {
		if !ls.started.Load() {
			log.Warn("HTTP+SSE client session closed: no message within the wait (http.legacy_init_wait)")
			ls.CloseClient()
			st.End()
		}
	})
	ls.Start(st.End, func() { // the stream ends with the session; it is forgotten once it has ended
		uninitialized.Stop()
		l.sessions.RemoveIf(ls.ID, ls)
	})
	return ls, nil
}

// legacyPost hands an old client's message to its session: 202 at once;
// whatever answers it comes on the event stream.
func (lg legacyFront) legacyPost(ctx *fasthttp.RequestCtx) {
	ls, ok := lg.s.Legacy.sessions.Lookup(string(ctx.QueryArgs().Peek("sessionId")))
	if !ok {
		ctx.Error("unknown or ended session: open the event stream anew", fasthttp.StatusNotFound)
		return
	}
	line, err := upstream.OneLine(ctx.PostBody())
	if err != nil || len(line) == 0 {
		ctx.Error("the body is not a JSON-RPC message", fasthttp.StatusBadRequest)
		return
	}
	ls.started.Store(true) // its first message, whatever its method and revision, ends the wait
	var f framing.Frame    // parsed once: the session decides it as it is
	if err := f.Parse(line); err != nil {
		ls.st.Send(ls.Sess.Invalid(err, line), true) // where every answer goes
		ctx.SetStatusCode(fasthttp.StatusAccepted)
		ctx.SetBodyString("Accepted")
		return
	}
	switch err := ls.connect(); {
	case errors.Is(err, lines.ErrEnded):
		ctx.Error("the session has ended", fasthttp.StatusNotFound)
		return
	case err != nil: // its requests get the proxy's error where every answer goes; the session ends
		if replies := cannotStartReplies(&f); len(replies) > 0 {
			ls.st.Send(proxy.JoinFrame(replies, f.Batch), true)
		}
		ls.CloseClient()
		ctx.SetStatusCode(fasthttp.StatusAccepted)
		ctx.SetBodyString("Accepted")
		return
	}
	lineUpstream{lg.s}.headerTraceInto(ctx, &f, line)
	err = ls.Sess.Submit(&f, proxy.TraceContext{}, stdio.From{}, func(sub *stdio.Submitted) {
		for _, r := range sub.Replies { // refusals go where every answer goes
			ls.st.Send(r, true)
		}
	})
	if err != nil {
		ctx.Error("the session has ended", fasthttp.StatusNotFound)
		return
	}
	ctx.SetStatusCode(fasthttp.StatusAccepted)
	ctx.SetBodyString("Accepted")
}

func (l *Legacy) provision(idle time.Duration, most int, clk clock.Clock, totals *proxy.Counters) {
	l.sessions.Init(idle, most, clk)
	l.totals = totals
}

func (l *Legacy) table() table  { return &l.sessions }
func (l *Legacy) InFlight() int { return l.sessions.InFlight() }

// stopAll ends every old client's session as lines.Session.Stop does (its
// requests in flight cancelled upstream first, as from "shutdown"), all at
// once, and returns once each has ended.
func (l *Legacy) stopAll(reason string) {
	var wg sync.WaitGroup
	for _, ls := range l.sessions.All() {
		wg.Go(func() { ls.StopAndWait(proxy.SourceShutdown, reason) })
	}
	wg.Wait()
	l.retiring.Wait()
}

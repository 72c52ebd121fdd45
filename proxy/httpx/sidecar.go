package httpx

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/owned"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/closewatch"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/joinwrite"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/origin"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/resourcemeta"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/sessiontable"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/stream"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// Defaults for Sidecar.
const (
	DefaultPath        = "/mcp"
	DefaultCancelGrace = 500 * time.Millisecond
	// NoCancelGrace as a Sidecar's CancelGrace ends a cancelled request's
	// stream at once.
	NoCancelGrace      time.Duration = -1
	DefaultEventMemory               = 256 << 20
)

// Sidecar relays MCP's Streamable HTTP transport to an upstream MCP server
// and makes cancellation work on the way. Its fields are its configuration:
// set them, then Provision (which Validates them, and which Handler calls
// if nobody did), serve Handler's handler, and Cleanup once the server has
// stopped. Provision leaves the fields as they were set; defaults live
// apart from them.
type Sidecar struct {
	// Upstream is the upstream MCP endpoint's URL. Required, unless
	// Children serves a stdio server instead.
	Upstream string
	// Children, when set, serves a stdio MCP server, a child per session,
	// in place of an upstream URL; or, without a command, the sessions of
	// the HTTP+SSE server at Upstream (see UpstreamTransport).
	Children *Children
	// Legacy, when set, also serves old clients the 2024-11-05 HTTP+SSE
	// transport's endpoints, in front of Children's servers.
	Legacy *Legacy
	// UpstreamTransport, when Children dials an HTTP+SSE upstream, says
	// whether the upstream is known to speak it (TransportSSE, or empty) or
	// is to be probed at the first request (TransportAuto).
	UpstreamTransport string
	// Path is the MCP endpoint the sidecar serves. If empty, DefaultPath.
	Path string
	// PublicURL, if set, is the sidecar's base URL as its clients reach it
	// (see oauth.go); else http:// and each request's Host.
	PublicURL string
	// AllowedOrigins lists the Origin header values accepted besides none
	// at all; any other gets 403 (the spec requires validating Origin). An
	// entry "*" accepts every origin. With CheckHost, origins on a loopback
	// name (http://localhost:3000, http://127.0.0.1:8080) are accepted too.
	AllowedOrigins []string
	// CheckHost, when set, refuses with 403 a Host header that does not name
	// the loopback interface: DNS rebinding protection for a sidecar bound
	// to 127.0.0.1.
	CheckHost bool
	// KeepsHijackedConns says that the fasthttp.Server serving Handler
	// keeps hijacked connections (its KeepHijackedConns): a session's GET
	// stream, detached from the server's connection loop, then gives its
	// request context back at once (see stream.Detached).
	KeepsHijackedConns bool
	// MaxBodySize bounds a POST's body and an upstream JSON response. If
	// zero, framing.DefaultMaxFrameSize.
	MaxBodySize int
	// MaxResponseHeaderBytes bounds the upstream's response headers. If
	// zero, DefaultMaxResponseHeaderBytes.
	MaxResponseHeaderBytes int
	// UpstreamHeaders are added to each request the sidecar sends the
	// upstream that does not set them itself (a deployment's API key).
	UpstreamHeaders []upstream.Header
	// CAFile, if set, is a PEM file of CA certificates trusted for the
	// upstream's TLS besides the system's (a private CA): http.ca_file.
	CAFile string
	// ProxyFromEnv sends the requests to the upstream through the HTTP
	// proxy HTTPS_PROXY or HTTP_PROXY names, as NO_PROXY allows (never to a
	// loopback upstream): http.proxy: env.
	ProxyFromEnv bool
	// TrustedProxies are the addresses of proxies in front of the sidecar
	// (an ingress): a request from one is its X-Forwarded-For client's,
	// for the fair share of sessions each client has at the caps. Every
	// other request is its address's: a credential it sends, which the
	// sidecar cannot verify, buys no share of its own.
	TrustedProxies []netip.Prefix
	// UpstreamIdle is how long a connection to the upstream is kept
	// unused (keepalive.DefaultIdle if zero).
	UpstreamIdle time.Duration
	// CancelGrace is how long the response stream of a request cancelled by
	// the client stays open, so that the server's cancels of its own nested
	// requests reach the client, before the sidecar ends it. If zero,
	// DefaultCancelGrace; NoCancelGrace for none.
	CancelGrace time.Duration
	// DisconnectCancelAfter, when positive, makes a dropped response stream
	// a cancel in protocol revisions 2025-03-26 to 2025-11-25, for clients
	// that only ever close streams and never POST a cancel: if the client
	// has not resumed the session's streams within this time, the requests
	// the stream was to answer are cancelled upstream on its behalf. The
	// spec says a disconnect is not a cancel, so this is off by default. In
	// 2026-07-28 closing the stream is the cancel anyway.
	DisconnectCancelAfter time.Duration
	// Logger receives the sidecar's logs. If nil, nothing is logged.
	Logger *zap.Logger
	// Tracker configures each session's tracker; its Logger is ignored.
	Tracker proxy.TrackerOptions
	// OnUpstreamError, if set, is called for each request the upstream
	// could not be reached for or failed, for metrics.
	OnUpstreamError func()
	// OnCancel, if set, is called for each request cancelled upstream, with
	// where the cancel came from: "client" (it sent one), "disconnect" (it
	// dropped the stream: 2026-07-28, or the opt-in grace), "session_end"
	// (DELETE) or "shutdown". For metrics; it must not block.
	OnCancel func(source string)
	// OnNotified, if set, is told, for each cancel the sidecar sends the
	// upstream, how long after the cancel came (or was decided) the
	// upstream answered its notification.
	OnNotified func(time.Duration)
	// Governor, if set, gives each session its governor, which applies the
	// per-request policy (package policy's Engine.Governor); scope names
	// the session.
	Governor func(scope string) func(proxy.Actions) proxy.Governor
	// NewTracer, if set, makes each session's tracer (see proxy.Tracer):
	// its requests' spans continue the trace context in their params._meta,
	// or else the POST's traceparent header, and the upstream gets the
	// proxy's in both.
	NewTracer func() proxy.Tracer
	// SessionIdle is how long a session of any kind may go without a
	// request, with nothing in flight and no stream open, before the
	// sidecar forgets it (and stops its server, if it runs one). If zero,
	// DefaultSessionIdle.
	SessionIdle time.Duration
	// MaxSessions caps, per kind, the sessions that run a server or an
	// upstream connection of their own (Children's, Legacy's); at the cap
	// the least recently used one with nothing in flight and no stream
	// open is stopped to make room, or, if there is none, the new session
	// is refused with 503. If zero, DefaultMaxSessions.
	MaxSessions int
	// MaxRelayedSessions caps the upstream sessions the sidecar relays (a
	// Streamable HTTP upstream's, which cost the sidecar little): an
	// initialize beyond it is refused with 503 and Retry-After, and no
	// session is evicted for it. If zero, DefaultMaxRelayedSessions.
	MaxRelayedSessions int
	// EventMemory bounds the memory that all upstream event streams
	// together may hold for events larger than 64 KiB (about twice each
	// such event's size); a stream whose event does not fit ends with the
	// proxy's error for its requests. If zero, DefaultEventMemory.
	EventMemory int64
	// LateWatch is how long, after a client's cancel has ended its stream,
	// the upstream's answer is still read for a request whose late answer
	// the governor wants (a hook compensates it), in the 2025 revisions.
	// If zero, the upstream's stream ends with the client's.
	LateWatch time.Duration
	// Clock runs the sidecar's graces, idle periods and idle sweep, its
	// Children's included. If nil, the real one.
	Clock clock.Clock
	// Fleet, when set, lets cancels find the replica holding their request
	// (see Fleet): the sidecar can run without session affinity.
	Fleet Fleet
	// KeepRevision, when set, relays a 2025 client's requests without a
	// session in its revision, even when the stateless upstream speaks
	// 2026-07-28 (see modernize.go); closing such a request's stream then
	// may not cancel it.
	KeepRevision bool

	once    sync.Once
	cleanup sync.Once
	// notifying owns the goroutines that tell the upstream of cancels, bg
	// the other ones that outlive the request that started them (the
	// proxy's own requests, answers read for nobody, the fleet's asks);
	// Cleanup waits for both.
	notifying, bg owned.Group
	// pumps are the streams whose upstream a pump reads (in bg), a late
	// answer among them that no client waits for: the sidecar's end cuts
	// them, so that bg ends with it.
	pumps   pumpSet
	initErr error
	// target is what the front hands a checked request to, chosen once,
	// by Provision (targetOf).
	target target
	// up is the upstream with the one client that reaches it, which the
	// relay and the old clients' sessions of a Streamable HTTP upstream
	// share with what they learn of it (its revision, its tools' mirrored
	// parameters); sse the same server and client as an HTTP+SSE upstream,
	// for Children's sessions without a command. Both made by Provision.
	up       *upstream.StreamableUpstream
	sse      *upstream.SSEUpstream
	sessions sessiontable.Table[*session] // the sessions relayed upstream
	own      requestSessions              // the sessions that are a request's own, while it runs
	// closes sees clients leave their streams; soon runs what waits
	// headDelay. Both are stopped by Cleanup.
	closes closewatch.Watcher
	// metadataURL is where the upstream's challenges say its protected
	// resource metadata is, when that is not the well-known URL (oauth.go).
	metadataURL atomic.Pointer[string]
	soon        closewatch.Queue
	// detached serves the sessions' GET streams off fasthttp's
	// connection loop; Cleanup ends them.
	detached stream.Detached
	totals   proxy.Counters // every session's counts, ended ones' too
	kinds    []kind         // the other kinds of session it serves (kindsOf)
	sweeper  sessiontable.Sweeper
	// stopFleet stops answering the fleet's cancels.
	stopFleet func()
	log       *zap.Logger
	budget    *framing.Budget // EventMemory's
	clock     clock.Clock
	// path, maxBody and grace are Path, MaxBodySize and CancelGrace, or
	// their defaults.
	path    string
	maxBody int
	grace   time.Duration
}

// provisionUpstream makes the one client of the upstream and the
// upstreams over it (s.up, s.sse). A sidecar of a stdio server has no
// upstream to reach: its client is never used.
func (s *Sidecar) provisionUpstream() error {
	ep := upstream.Endpoint{URL: new(url.URL), Client: upstream.NewClient(s.maxBody, s.MaxResponseHeaderBytes)}
	if s.Upstream != "" {
		var err error
		ep, err = upstream.NewEndpoint(s.Upstream, upstream.Options{MaxBody: s.maxBody, MaxHeader: s.MaxResponseHeaderBytes,
			Headers: s.UpstreamHeaders, ProxyFromEnv: s.ProxyFromEnv, Idle: s.UpstreamIdle, CAFile: s.CAFile})
		if err != nil {
			return err
		}
	}
	s.up = &upstream.StreamableUpstream{Endpoint: ep, MaxBodySize: s.maxBody, KeepRevision: s.KeepRevision,
		Clock: s.clock, OnUpstreamError: s.OnUpstreamError}
	s.sse = &upstream.SSEUpstream{URL: ep.URL, Client: ep.Client, MaxBodySize: s.maxBody, OnUpstreamError: s.OnUpstreamError}
	if cs := s.Children; cs != nil {
		cs.dial = cs.Dial
		if cs.dial == nil {
			cs.dial = s.sse
		}
	}
	return nil
}

// Validate checks the configuration, and reports what is wrong with it.
func (s *Sidecar) Validate() error {
	var errs []error
	u, err := url.Parse(s.Upstream)
	switch {
	case s.Children != nil && s.Children.Dial == nil && s.Upstream == "":
		errs = append(errs, errors.New("no server command for the children, and no upstream"))
	case (s.Children == nil || s.Children.Dial == nil) && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == ""):
		errs = append(errs, fmt.Errorf("upstream %q is not an http(s) URL", s.Upstream))
	}
	switch s.UpstreamTransport {
	case "", upstream.TransportStreamable, upstream.TransportSSE, upstream.TransportAuto:
	default:
		errs = append(errs, fmt.Errorf("upstream transport %q is none of %s, %s, %s", s.UpstreamTransport,
			upstream.TransportAuto, upstream.TransportStreamable, upstream.TransportSSE))
	}
	path := cmp.Or(s.Path, DefaultPath)
	if !strings.HasPrefix(path, "/") {
		errs = append(errs, fmt.Errorf("path %q does not start with /", path))
	}
	if l := s.Legacy; l != nil {
		for _, p := range []string{l.sseRoute(), l.msgRoute()} {
			if !strings.HasPrefix(p, "/") || p == path {
				errs = append(errs, fmt.Errorf("legacy path %q must start with / and differ from the path %q", p, path))
			}
		}
		if l.sseRoute() == l.msgRoute() {
			errs = append(errs, fmt.Errorf("the legacy event stream and message paths are both %q", l.sseRoute()))
		}
	}
	if s.MaxBodySize < 0 || s.MaxSessions < 0 || s.MaxRelayedSessions < 0 || s.CancelGrace < NoCancelGrace || s.DisconnectCancelAfter < 0 || s.SessionIdle < 0 || s.EventMemory < 0 || s.LateWatch < 0 {
		errs = append(errs, errors.New("a size or a duration is negative"))
	}
	return errors.Join(errs...)
}

// Provision validates the configuration and sets up what serving needs:
// the upstream's client, the session tables and the idle sweep over them,
// the event memory budget. It does its work once; later calls return its
// result.
func (s *Sidecar) Provision() error {
	s.once.Do(func() {
		if s.initErr = s.Validate(); s.initErr != nil {
			return
		}
		s.path = cmp.Or(s.Path, DefaultPath)
		s.maxBody = cmp.Or(s.MaxBodySize, framing.DefaultMaxFrameSize)
		s.grace = max(cmp.Or(s.CancelGrace, DefaultCancelGrace), 0)
		s.log = s.Logger
		if s.log == nil {
			s.log = zap.NewNop()
		}
		s.clock = clock.Or(s.Clock)
		if s.initErr = s.provisionUpstream(); s.initErr != nil {
			return
		}
		idle, most := cmp.Or(s.SessionIdle, DefaultSessionIdle), cmp.Or(s.MaxSessions, DefaultMaxSessions)
		s.sessions.Init(idle, cmp.Or(s.MaxRelayedSessions, DefaultMaxRelayedSessions), s.clock)
		s.sessions.NoEvict = true // a relayed session is the client's and the upstream's: never dropped for another
		s.kinds = kindsOf(s)
		s.target = targetOf(s)
		for _, k := range s.kinds {
			k.provision(idle, most, s.clock, &s.totals)
		}
		s.soon.Delay = headDelay
		s.detached.KeepsConns = s.KeepsHijackedConns
		s.budget = framing.NewBudget(cmp.Or(s.EventMemory, DefaultEventMemory))
		tables := tablesOf(s)
		s.sweeper.Every(s.clock, max(idle/4, time.Second), func() {
			for _, t := range tables { // retire the idle sessions of every kind
				t.Sweep()
			}
		})
		if s.Fleet != nil {
			s.stopFleet = s.Fleet.ServeCancels(s.acceptFleetCancel, s.fleetSessionEnded)
		}
	})
	return s.initErr
}

// Cleanup ends what the sidecar started, once its server has stopped
// serving: the idle sweep stops; requests still in flight are cancelled
// upstream, as a client cancel would, with reason; old clients' sessions
// and the children end, and Cleanup returns once they have. Calls after
// the first do nothing.
func (s *Sidecar) Cleanup(reason string) {
	if s.Provision() != nil {
		return
	}
	s.cleanup.Do(func() {
		s.sweeper.Stop()
		if s.stopFleet != nil {
			s.stopFleet()
		}
		s.CancelAll(reason)
		for _, k := range s.kinds {
			k.stopAll(reason)
		}
		s.pumps.cutAll() // the late answers read for nobody now
		if ok, n := s.detached.Stop(ownedWait); !ok {
			s.log.Warn("event streams still written at shutdown", zap.Int("streams", n))
		}
		s.waitOwned(&s.bg, "requests to the upstream not yet answered")
		s.soon.Stop()
		s.closes.Stop()
	})
}

// ErrNoUpstream is returned by Handler when the Upstream URL is invalid.
var ErrNoUpstream = errors.New("httpx: no valid upstream")

// Handler returns the fasthttp handler, or an error for a bad configuration.
// Served on a Listener, its event streams take fewer writes.
func (s *Sidecar) Handler() (fasthttp.RequestHandler, error) {
	if err := s.Provision(); err != nil {
		return nil, errors.Join(ErrNoUpstream, err)
	}
	return s.serve, nil
}

func (s *Sidecar) serve(ctx *fasthttp.RequestCtx) {
	if origin.CORS(ctx, s.AllowedOrigins, s.CheckHost, s.servedPath) {
		return
	}
	s.dropHopHeaders(ctx)
	if s.Legacy != nil && (legacyFront{s}).serveLegacy(ctx) {
		return
	}
	if s.serveResourceMetadata(ctx) {
		return
	}
	if string(ctx.Path()) != s.path {
		ctx.Error("not found", fasthttp.StatusNotFound)
		return
	}
	if !s.allowed(ctx) {
		return
	}
	switch string(ctx.Method()) {
	case fasthttp.MethodPost:
		s.target.post(ctx)
	case fasthttp.MethodGet:
		s.target.get(ctx)
	case fasthttp.MethodDelete:
		s.target.delete(ctx)
	default:
		ctx.Response.Header.Set("Allow", "GET, POST, DELETE")
		ctx.Error("method not allowed", fasthttp.StatusMethodNotAllowed)
	}
}

// allowed validates Origin and, if configured, Host; it answers 403 (400
// for a request with two Host or Origin headers, which could show a check
// one value and the upstream another) and reports false for a request that
// fails. Host is checked both as the header and as the authority of an
// absolute-form request URI, which would otherwise stand in for it.
func (s *Sidecar) allowed(ctx *fasthttp.RequestCtx) bool {
	status, why := origin.Refuse(ctx, s.AllowedOrigins, s.CheckHost)
	if status == 0 {
		return true
	}
	h := &ctx.Request.Header
	s.log.Warn("request refused: "+why, zap.ByteString("origin", upstream.Peek(h.All(), "Origin")), zap.ByteString("host", h.Host()),
		zap.ByteString("uri_host", ctx.URI().Host()))
	ctx.Error(why, status)
	return false
}

// Sessions returns how many client sessions the sidecar serves, of every
// kind (requests without a session are not counted).
func (s *Sidecar) Sessions() int {
	n := 0
	for _, t := range s.tables() {
		n += t.Len()
	}
	return n
}

// InFlight returns how many client requests are in flight in the sessions
// the sidecar serves, of every kind, and on the shared child.
func (s *Sidecar) InFlight() int {
	n := 0
	if s.Provision() != nil {
		return 0
	}
	n += s.sessions.InFlight()
	for _, k := range s.kinds {
		n += k.InFlight()
	}
	own := s.own.all()
	defer s.own.release(own)
	for _, sess := range own {
		if !s.sessions.Holds(sess.sessionID(), sess) {
			n += sess.InFlight()
		}
	}
	return n
}

// Stats returns the counters of every session the sidecar has served,
// those that ended included: those it relays, those of Children (the
// shared child's included) and those of Legacy.
func (s *Sidecar) Stats() proxy.Stats { return s.totals.Stats() }

// Ready reports whether the upstream can take requests: it accepts
// connections (a stdio server starts on demand).
func (s *Sidecar) Ready() error {
	if err := s.Provision(); err != nil {
		return err
	}
	return s.target.ready()
}

// CancelAll cancels upstream every client request still in flight in every
// session, as a client cancel would, and ends their streams: what a
// shutdown does once its grace is over.
func (s *Sidecar) CancelAll(reason string) {
	if s.Provision() != nil {
		return
	}
	sessions := s.sessions.All()
	own := s.own.all()
	defer s.own.release(own)
	for _, sess := range own {
		if !s.sessions.Holds(sess.sessionID(), sess) { // one the upstream took is in both
			sessions = append(sessions, sess)
		}
	}
	for _, sess := range sessions {
		// The client hears why, as the wrapper's does: -32000 on the
		// request's stream, not a stream that just ends; before the
		// upstream, once notified, may end the stream.
		sess.core.CancelAll(proxy.SourceShutdown, reason, func(id framing.ID) []byte {
			return sess.t.ErrorReply(id, proxy.CodeServerGone, reason)
		})
	}
	s.waitOwned(&s.notifying, "cancels not yet answered by the upstream")
	for _, sess := range sessions {
		sess.endAll()
		if sess.lingers.Load() { // the tasks it hosts end with the sidecar
			sess.closeGovernor()
		}
	}
}

// waitOwned waits, up to ownedWait, for the goroutines of g, and says so if
// some are left (what each waits for is the upstream's, which a hung
// upstream never gives).
func (s *Sidecar) waitOwned(g *owned.Group, what string) {
	if ok, left := g.Wait(ownedWait); !ok {
		s.log.Warn("shutting down with "+what, zap.Int("requests", left), zap.Duration("waited", ownedWait))
	}
}

// cancelled reports one cancel to OnCancel.
func (s *Sidecar) cancelled(source proxy.Source) {
	if s.OnCancel != nil {
		s.OnCancel(string(source))
	}
}

// Listener returns ln with each connection it accepts able to hold a
// write (package joinwrite), which the sidecar's event streams use to take
// fewer writes; serve the sidecar's Handler on it.
func Listener(ln net.Listener) net.Listener { return joinwrite.Listener(ln) }

// servedPath reports whether the sidecar serves path: the MCP endpoint, an
// old client's, or, in front of an HTTP upstream, the OAuth protected
// resource metadata that a browser client reads before it signs in.
func (s *Sidecar) servedPath(path string) bool {
	if rest, ok := strings.CutPrefix(path, resourcemeta.WellKnown); ok && s.Upstream != "" && (rest == "" || rest[0] == '/') {
		return true
	}
	return path == s.path || (s.Legacy != nil && (path == s.Legacy.sseRoute() || path == s.Legacy.msgRoute()))
}

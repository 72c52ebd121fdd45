package httpx

import (
	"net"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/connlimit"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// The sidecar's front keeps every client session in a sessionTable, one per
// kind of session (those it relays to a Streamable HTTP upstream, those of
// Children, those of old clients), under the same rules: looked up by id,
// swept once idle by the one sweep the Sidecar runs from Provision to
// Cleanup, capped where the session runs a server of its own.

// target is what the front hands a client's request to once it has
// checked it (path, Origin, Host): the relay to a Streamable HTTP upstream,
// whose sessions and streams are the upstream's own, each cancel decided
// by the session's tracker on the way; or sessions of lines, each with a
// server of its own (a stdio child, an HTTP+SSE upstream's session), whose
// cancels the stdio relay decides. Old clients' sessions are always of
// lines: their server comes from lineServers.
type target interface {
	post(ctx *fasthttp.RequestCtx)
	get(ctx *fasthttp.RequestCtx)
	delete(ctx *fasthttp.RequestCtx)
	// lineServers says where an old client's session of lines gets its
	// server.
	lineServers() lineServers
	// ready reports whether the upstream can take requests: /readyz.
	ready() error
}

// The sidecar's parts: each is a view of the sidecar (its configuration,
// its tables, its goroutine groups) with the methods of one concern, made
// where it is needed (relay{s}).
type (
	// relay serves Streamable HTTP clients in front of a Streamable HTTP
	// upstream: their POSTs, GET streams and DELETEs, each session's
	// decisions and response streams (post.go, stream.go, policy.go).
	relay struct{ s *Sidecar }
	// outbound is the relay's side toward the upstream: the requests it
	// sends, the cancels it tells, the proxy's own requests, and what it
	// learns of the upstream (its transport, its revision).
	outbound struct{ s *Sidecar }
	// lineUpstream serves Streamable HTTP clients in sessions of lines:
	// Children's (child_http.go).
	lineUpstream struct{ s *Sidecar }
	// legacyFront serves old clients (the 2024-11-05 HTTP+SSE transport),
	// each in a session of lines (legacy.go).
	legacyFront struct{ s *Sidecar }
)

// lineServers is where a session of lines gets its server: the Dialer,
// the options of the session between them, and the grace its stop allows
// the server.
type lineServers struct {
	dial  upstream.Dialer
	opts  stdio.Options
	grace time.Duration
}

// lineServers: an old client's session of the Streamable HTTP upstream
// (Legacy.Dial, or the sidecar's upstream's).
func (rl relay) lineServers() lineServers {
	d := upstream.Dialer(rl.s.up)
	if rl.s.Legacy.Dial != nil {
		d = rl.s.Legacy.Dial
	}
	return lineServers{dial: d, opts: rl.s.Legacy.Session, grace: graceOf(d)}
}

func (lu lineUpstream) post(ctx *fasthttp.RequestCtx)   { lu.childPost(ctx) }
func (lu lineUpstream) get(ctx *fasthttp.RequestCtx)    { lu.childGet(ctx) }
func (lu lineUpstream) delete(ctx *fasthttp.RequestCtx) { lu.childDelete(ctx) }

// ready: a stdio server starts on demand; an HTTP+SSE upstream must accept
// connections.
func (lu lineUpstream) ready() error {
	if lu.s.Children.runsCommand() {
		return nil
	}
	return reachable(lu.s.up.URL)
}

func (rl relay) ready() error { return reachable(rl.s.up.URL) }

// reachable reports whether u's host accepts connections.
func reachable(u *url.URL) error {
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	c, err := net.DialTimeout("tcp", host, time.Second)
	if err != nil {
		return err
	}
	return c.Close()
}

func (lu lineUpstream) lineServers() lineServers {
	cs := lu.s.Children
	return lineServers{dial: cs.dial, opts: cs.Session, grace: cs.grace()}
}

// table is what the sidecar does with each of its session tables.
type table interface {
	Len() int
	InFlight() int
	Stats() proxy.Stats
	Sweep()
}

// tables returns the sidecar's session tables, one per kind of session;
// none before Provision.
func (s *Sidecar) tables() []table {
	if s.Provision() != nil {
		return nil
	}
	return tablesOf(s)
}

// tablesOf returns s's session tables, Provision done or under way.
func tablesOf(s *Sidecar) []table {
	t := []table{&s.sessions}
	for _, k := range s.kinds {
		t = append(t, k.table())
	}
	return t
}

// kind is a kind of session the front serves besides those it relays:
// Children's (a stdio server's, or an HTTP+SSE upstream's) and Legacy's
// (old HTTP+SSE clients'). The front provisions, sweeps, counts and stops
// every kind the same way; which kinds it has is its configuration's
// (kindsOf), said once.
type kind interface {
	// provision sets up its table (idle, the cap, the clock) and the
	// counters its sessions add to.
	provision(idle time.Duration, most int, clk clock.Clock, totals *proxy.Counters)
	table() table
	InFlight() int // the requests in flight in its sessions
	stopAll(reason string)
}

// kindsOf returns the kinds of session s's configuration names, in the
// order they stop: old clients' sessions first, then the servers'.
func kindsOf(s *Sidecar) []kind {
	var ks []kind
	if s.Legacy != nil {
		ks = append(ks, s.Legacy)
	}
	if s.Children != nil {
		ks = append(ks, s.Children)
	}
	return ks
}

// afterDisconnect is the opt-in disconnect grace (DisconnectCancelAfter),
// for every kind of session: once a client has left a stream whose requests
// are unanswered, cancel runs after the grace, unless came reports, given
// when the client left (UnixNano), that it came back for its answers
// meanwhile (came may be nil). It reports whether the grace is on, and logs
// what follows as a stream_left event (n requests).
func (s *Sidecar) afterDisconnect(log *zap.Logger, n int, came func(left int64) bool, cancel func()) bool {
	if s.DisconnectCancelAfter <= 0 {
		streamLeft(log, n, leftRunsOn)
		return false
	}
	streamLeft(log, n, leftGrace)
	left := s.clock.Now().UnixNano()
	s.clock.AfterFunc(s.DisconnectCancelAfter, func() {
		if came == nil || !came(left) {
			cancel()
		}
	})
	return true
}

// What follows a client's leaving a stream that owed answers (stream_left).
const (
	leftCancelled = "cancelled"                                 // 2026-07-28: the close is the cancel
	leftGrace     = "cancelled unless resumed within the grace" // http.disconnect_cancel_after
	leftRunsOn    = "runs on"                                   // a 2025 close is no cancel
)

// streamLeft says that a client left a stream with n requests unanswered,
// and what follows: a stream_left event.
func streamLeft(log *zap.Logger, n int, then string) {
	log.Debug("the client left a stream that owed answers", events.Mark(events.StreamLeft),
		zap.Int("requests", n), zap.String("then", then))
}

// peerOf names who sent a request, for fairness at a session cap and the
// bounds one client must not take all of: its address (an IPv6 client's
// /64), or behind a trusted proxy its client's (X-Forwarded-For). Not a
// credential the request carries, which the sidecar cannot verify: one
// client inventing one per session would buy a share each (20 of a
// victim's idle sessions evicted so).
func (s *Sidecar) peerOf(ctx *fasthttp.RequestCtx) string { return peerName(s.peerAddr(ctx)) }

// peerName is peerOf's name for the address a.
func peerName(a netip.Addr) string { return "address:" + connlimit.ClientKey(a).String() }

// peerAddr is the address peerOf names, made without a string: it is
// taken for every POST.
func (s *Sidecar) peerAddr(ctx *fasthttp.RequestCtx) netip.Addr {
	addr := connlimit.AddrOf(ctx.RemoteAddr())
	if !s.trusts(addr) {
		return addr
	}
	// A trusted proxy's request: its client is the last address of
	// X-Forwarded-For that is not a trusted proxy's (RFC 7239's rule for
	// the header it replaces), else the proxy itself.
	var hops []string
	for k, v := range ctx.Request.Header.All() {
		if strings.EqualFold(string(k), "X-Forwarded-For") {
			hops = append(hops, strings.Split(string(v), ",")...)
		}
	}
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			break // a hop that is no address: nothing before it is to be trusted
		}
		if a = a.Unmap(); !s.trusts(a) {
			return a
		}
	}
	return addr
}

// trusts reports whether a is one of the TrustedProxies.
func (s *Sidecar) trusts(a netip.Addr) bool {
	for _, p := range s.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

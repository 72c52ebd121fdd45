package httpx

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

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
// lines: their backend comes from dialLines.
type target interface {
	post(ctx *fasthttp.RequestCtx)
	get(ctx *fasthttp.RequestCtx)
	delete(ctx *fasthttp.RequestCtx)
	// servesLines reports whether dialLines can serve an old client.
	servesLines() bool
	// dialLines starts or dials the server of an old client's session,
	// and returns it with the options of the session between them and the
	// grace its stop allows the server.
	dialLines(log *zap.Logger) (Backend, stdio.Options, time.Duration, error)
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

func (rl relay) servesLines() bool { return rl.s.Legacy.Dial != nil }

func (rl relay) dialLines(log *zap.Logger) (Backend, stdio.Options, time.Duration, error) {
	back, err := rl.s.Legacy.Dial(log)
	return back, rl.s.Legacy.Session, 0, err
}

func (lu lineUpstream) post(ctx *fasthttp.RequestCtx)   { lu.childPost(ctx) }
func (lu lineUpstream) get(ctx *fasthttp.RequestCtx)    { lu.childGet(ctx) }
func (lu lineUpstream) delete(ctx *fasthttp.RequestCtx) { lu.childDelete(ctx) }
func (lu lineUpstream) servesLines() bool               { return true }

// ready: a stdio server starts on demand; an HTTP+SSE upstream must accept
// connections.
func (lu lineUpstream) ready() error {
	if lu.s.Children.Dial == nil {
		return nil
	}
	return relay{lu.s}.ready()
}

// ready reports whether the upstream accepts connections.
func (rl relay) ready() error {
	u := rl.s.endpoint.URL
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

func (lu lineUpstream) dialLines(log *zap.Logger) (Backend, stdio.Options, time.Duration, error) {
	cs := lu.s.Children
	copts := cs.Child
	copts.Logger = log
	back, err := cs.backend(copts)
	return back, cs.Session, copts.TermAfter, err
}

// usage is when a session last saw a request, and whose it is.
type usage struct {
	last atomic.Int64
	// owner is the peer that opened the session (see peerOf), set before
	// the session is shared: at a cap, a peer holding more than its share
	// of the sessions may evict only its own.
	owner string
}

func (u *usage) touch(now time.Time) { u.last.Store(now.UnixNano()) }
func (u *usage) usedAt() int64       { return u.last.Load() }
func (u *usage) peer() string        { return u.owner }

// member is what a sessionTable needs of a session.
type member interface {
	comparable
	touch(now time.Time)
	usedAt() int64
	// peer is who opened the session (see peerOf).
	peer() string
	// busy reports whether the session has a request in flight or a
	// stream open; a busy session is never idle, nor evicted.
	busy() bool
	// retire ends what the session runs once the table has forgotten it,
	// for why (retireIdle or retireEvicted). It must not block.
	retire(why string)
	stats() proxy.Stats
	// inFlight counts the client's requests in flight.
	inFlight() int
}

// Why a table forgets a session on its own.
const (
	retireIdle    = "idle"
	retireEvicted = "evicted"
)

// errFull is add's answer at the cap, with no session to evict.
var errFull = errors.New("too many sessions, none idle")

// sessionTable holds one kind of client session by id.
type sessionTable[S member] struct {
	mu    sync.Mutex // guards m
	m     map[string]S
	idle  time.Duration // how long a session may go unused, not busy
	max   int           // the cap on sessions; zero for none
	clock clock.Clock
	// noEvict, set before use, refuses a session at the cap rather than
	// evicting an idle one.
	noEvict bool
}

func (t *sessionTable[S]) init(idle time.Duration, max int, clk clock.Clock) {
	t.m, t.idle, t.max, t.clock = make(map[string]S), idle, max, clk
}

// lookup returns the session registered under id, and marks it used.
func (t *sessionTable[S]) lookup(id string) (S, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.m[id]
	if ok {
		s.touch(t.clock.Now())
	}
	return s, ok
}

// add registers s under id and returns it, or the session already
// registered under id. At the cap it first evicts an idle session (see
// makeRoomLocked) or, with none it may evict, returns errFull.
func (t *sessionTable[S]) add(id string, s S) (S, error) {
	var zero S
	t.mu.Lock()
	if old, ok := t.m[id]; ok {
		t.mu.Unlock()
		return old, nil
	}
	evicted, ok := t.makeRoomLocked(s.peer())
	if !ok {
		t.mu.Unlock()
		return zero, errFull
	}
	s.touch(t.clock.Now())
	t.m[id] = s
	t.mu.Unlock()
	if evicted != zero {
		evicted.retire(retireEvicted)
	}
	return s, nil
}

// roomFor reports whether add would find room for a session of peer,
// evicting as add does.
func (t *sessionTable[S]) roomFor(peer string) bool {
	t.mu.Lock()
	evicted, ok := t.makeRoomLocked(peer)
	t.mu.Unlock()
	if evicted != *new(S) {
		evicted.retire(retireEvicted)
	}
	return ok
}

// makeRoomLocked makes room for one more session of peer, below the cap
// or by forgetting one that is not busy, which it returns for the caller
// to retire once unlocked. Fairness: each peer's share is the cap over
// the peers holding sessions (peer counted); a peer at or over its share
// may evict only a session of its own, and one under it a session of a
// peer over its share first, else any. Among those it may evict, a
// session never initialized goes first, then the least recently used.
// t.mu is held.
func (t *sessionTable[S]) makeRoomLocked(peer string) (evicted S, ok bool) {
	if t.max <= 0 || len(t.m) < t.max {
		return evicted, true
	}
	if t.noEvict {
		return evicted, false
	}
	held := map[string]int{peer: 0}
	for _, s := range t.m {
		held[s.peer()]++
	}
	share := max(t.max/len(held), 1)
	pick := func(may func(S) bool) string {
		best := ""
		for id, s := range t.m {
			if s.busy() || !may(s) {
				continue
			}
			if b, ok := t.m[best]; best == "" || ok && evictsBefore(s, b) {
				best = id
			}
		}
		return best
	}
	var victim string
	if held[peer] >= share {
		victim = pick(func(s S) bool { return s.peer() == peer })
	} else if victim = pick(func(s S) bool { return held[s.peer()] > share }); victim == "" {
		victim = pick(func(S) bool { return true })
	}
	if victim == "" {
		return evicted, false
	}
	evicted = t.m[victim]
	delete(t.m, victim)
	return evicted, true
}

// evictsBefore reports whether a goes before b when one must be evicted:
// a session never initialized first, then the least recently used.
func evictsBefore[S member](a, b S) bool {
	ai, bi := initializedOf(a), initializedOf(b)
	if ai != bi {
		return !ai
	}
	return a.usedAt() < b.usedAt()
}

// initializedOf reports whether a session has seen its initialize; a kind
// of session that cannot exist before one has.
func initializedOf(s any) bool {
	if i, ok := s.(interface{ started() bool }); ok {
		return i.started()
	}
	return true
}

// remove forgets the session registered under id, and returns it.
func (t *sessionTable[S]) remove(id string) (S, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.m[id]
	delete(t.m, id)
	return s, ok
}

// removeIf forgets s, if it is still the session registered under id.
func (t *sessionTable[S]) removeIf(id string, s S) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[id] == s {
		delete(t.m, id)
	}
}

// holds reports whether s is the session registered under id.
func (t *sessionTable[S]) holds(id string, s S) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return id != "" && t.m[id] == s
}

// sweep forgets and retires the sessions unused for longer than the idle
// period that are not busy (a cancel may still come for a busy one).
func (t *sessionTable[S]) sweep() {
	cutoff := t.clock.Now().Add(-t.idle).UnixNano()
	var idle []S
	t.mu.Lock()
	for id, s := range t.m {
		if s.usedAt() < cutoff && !s.busy() {
			delete(t.m, id)
			idle = append(idle, s)
		}
	}
	t.mu.Unlock()
	for _, s := range idle {
		s.retire(retireIdle)
	}
}

// all returns the sessions registered now.
func (t *sessionTable[S]) all() []S {
	t.mu.Lock()
	defer t.mu.Unlock()
	all := make([]S, 0, len(t.m))
	for _, s := range t.m {
		all = append(all, s)
	}
	return all
}

// len returns how many sessions are registered.
func (t *sessionTable[S]) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// stats sums the counters of the sessions registered.
func (t *sessionTable[S]) stats() proxy.Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	var st proxy.Stats
	for _, s := range t.m {
		st.Add(s.stats())
	}
	return st
}

// inFlight counts the client requests in flight in the sessions registered.
func (t *sessionTable[S]) inFlight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, s := range t.m {
		n += s.inFlight()
	}
	return n
}

// sweeper runs the idle sweep of every session table of the sidecar, each
// quarter of the idle period, from Provision until Cleanup stops it.
type sweeper struct {
	mu      sync.Mutex // guards the fields below
	timer   clock.Timer
	stopped bool
}

// every sweeps the tables every period until stop.
func (w *sweeper) every(clk clock.Clock, period time.Duration, tables []table) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	w.timer = clk.AfterFunc(period, func() {
		for _, t := range tables { // retire the idle sessions of every kind
			t.sweep()
		}
		w.every(clk, period, tables)
	})
}

// stop ends the idle sweep.
func (w *sweeper) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

// table is what the sidecar does with each of its session tables.
type table interface {
	len() int
	inFlight() int
	stats() proxy.Stats
	sweep()
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
	inFlight() int // the requests in flight in its sessions
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

// peerOf names who sent a request, for fairness at a session cap: the
// client's credential when it sends one (a hash of its Authorization
// header: never the header itself), else its address.
func peerOf(ctx *fasthttp.RequestCtx) string {
	if a := upstream.Peek(ctx.Request.Header.All(), "Authorization"); len(a) > 0 {
		sum := sha256.Sum256(a)
		return "credential:" + hex.EncodeToString(sum[:8])
	}
	if tcp, ok := ctx.RemoteAddr().(*net.TCPAddr); ok {
		return "address:" + tcp.IP.String()
	}
	return "address:" + ctx.RemoteAddr().String()
}

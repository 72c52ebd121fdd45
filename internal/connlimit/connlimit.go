// Package connlimit keeps a server accepting connections through a
// shortage of file descriptors, and bounds the connections it holds: in
// all, and per client address (an IPv6 client by its /64), closing the
// idlest idle connection, else the one that has been sending its request
// the longest, to make room for a new one. A few connections may be kept
// in reserve for some paths (health probes), so that those answer when
// every other connection is busy.
//
// Connections that never go idle would otherwise lock everyone out: slow
// request heads (a byte a second) from 4 addresses filled 16,384
// connections when only idle ones were closed for room, and one address
// was enough under a descriptor limit of 1,024.
//
// fasthttp's Serve returns on any accept error but a timeout, EMFILE
// among them: ~20,000 idle connections from one address (or 1,100 under
// ulimit -n 1024) stopped the sidecar. Here an accept that fails for want
// of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM) or because
// the client left first (ECONNABORTED) is tried again, after the idlest
// idle connection is closed to free a descriptor, or after a wait that
// doubles from 5 ms to 1 s, as net/http's server waits. The process's
// descriptor limit itself is left alone: Go raises the soft limit at start
// and restores it for child processes, which a Setrlimit here would undo
// for the stdio servers.
package connlimit

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
)

// Options bound a Listener's connections.
type Options struct {
	// Max bounds the connections held at once; 0: no bound.
	Max int
	// MaxPerClient bounds the connections of one client address; 0: no
	// bound.
	MaxPerClient int
	// Trusted are the addresses of proxies in front of the server (an
	// ingress): each carries many clients, so MaxPerClient does not apply
	// to them (Max does).
	Trusted []netip.Prefix
	// Reserve is how many of Max are kept for requests to ReservedPaths:
	// a connection admitted into the reserve (when every other is taken
	// and none may be closed for it) is answered 503 and closed for any
	// other path. 0: none.
	Reserve int
	// ReservedPaths are the paths the reserve serves (/healthz, /readyz).
	ReservedPaths []string
	// Log, if set, says (at most once a minute for each kind) when accepts
	// fail and when a connection is refused or closed for room.
	Log *zap.Logger
}

// Listener accepts connections within its Options' bounds. Serve with
// its ConnState as the server's, so that it knows which connections are
// idle.
type Listener struct {
	net.Listener
	o    Options
	done chan struct{} // closed by Close

	mu       sync.Mutex
	conns    map[*Conn]struct{}
	perAddr  map[netip.Addr]int  // by ClientKey
	reserved int                 // conns in the reserve
	said     [kinds]atomic.Int64 // when each kind of log line was last written (unix seconds)
}

// Kinds of log line, each said at most once a minute.
const (
	saidAccept = iota
	saidRefused
	saidEvicted
	saidReserve
	kinds
)

// New returns ln bounded by o, and by the process's descriptor limit less
// a quarter of it (DescriptorBound): the rest is for what the process
// opens itself (stdio servers' pipes, upstream connections, files), which
// connections held up to the limit would starve. One client may hold at
// most half of that bound, whatever o says, so that no single address can
// take every connection.
func New(ln net.Listener, o Options) *Listener {
	if most, ok := DescriptorBound(); ok && (o.Max <= 0 || o.Max > most) {
		if o.Log != nil {
			o.Log.Info("connections bounded below the process's descriptor limit", zap.Int("configured", o.Max), zap.Int("bound", most))
		}
		o.Max = most
	}
	if most, ok := DescriptorBound(); ok && (o.MaxPerClient <= 0 || o.MaxPerClient > max(most/2, 1)) {
		o.MaxPerClient = max(most/2, 1)
	}
	if o.Max > 0 {
		o.Reserve = min(o.Reserve, o.Max/2)
	}
	return &Listener{Listener: ln, o: o, done: make(chan struct{}), conns: make(map[*Conn]struct{}), perAddr: make(map[netip.Addr]int)}
}

// DescriptorBound returns how many connections a listener may hold within
// the process's descriptor limit: three quarters of it (a quarter, at least
// 32, kept for the rest), if the limit can be read.
func DescriptorBound() (int, bool) {
	limit, ok := descriptorLimit()
	if !ok {
		return 0, false
	}
	return max(limit-max(limit/4, 32), 1), true
}

// Conn is a connection a Listener accepted.
type Conn struct {
	net.Conn
	l       *Listener
	addr    netip.Addr
	key     netip.Addr // ClientKey(addr)
	count   bool       // counted against MaxPerClient
	reserve bool       // admitted into the reserve
	once    sync.Once
	// idleSince is when the connection last became idle (unix nanoseconds;
	// a new one is idle from its accept), 0 while a request is read or
	// served or the connection is hijacked (an event stream).
	idleSince atomic.Int64
	// readingSince is when the connection began sending its request (its
	// first byte), 0 once the handler has it (Handler), while idle, or
	// once hijacked.
	readingSince atomic.Int64
}

// Close closes the connection and gives its room back.
func (c *Conn) Close() error {
	c.once.Do(func() { c.l.forget(c) })
	return c.Conn.Close()
}

// NetConn returns the connection Conn wraps.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// SyscallConn gives the wrapped connection's own, for what watches the
// socket itself (the front's close watcher: in 2026-07-28 a client's close
// of its stream is the cancel, seen by the kernel).
func (c *Conn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

// Close stops accepting.
func (l *Listener) Close() error {
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	return l.Listener.Close()
}

// Accept returns the next connection within the bounds. A temporary
// failure is tried again; a connection beyond a bound, with no idle one to
// close for it, is closed at once.
func (l *Listener) Accept() (net.Conn, error) {
	const first, most = 5 * time.Millisecond, time.Second
	wait := first
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if !temporary(err) {
				return nil, err
			}
			l.say(saidAccept, "accepting a connection failed: trying again", zap.Error(err))
			if outOfDescriptors(err) && l.evict(func(*Conn) bool { return true }) {
				continue // a descriptor freed
			}
			select {
			case <-time.After(wait):
			case <-l.done:
				return nil, net.ErrClosed
			}
			wait = min(2*wait, most)
			continue
		}
		wait = first
		if wc := l.admit(c); wc != nil {
			return wc, nil
		}
	}
}

// temporary reports whether an accept's failure may pass: for want of
// descriptors or memory, or a client that left before it was accepted.
func temporary(err error) bool {
	var ne net.Error
	return outOfDescriptors(err) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.As(err, &ne) && ne.Timeout()
}

func outOfDescriptors(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// admit registers c within the bounds, making room by closing (of c's
// client, for its own bound) the idlest idle connection, else the one
// that has been sending its request the longest; with neither, c goes in
// the reserve if there is room there. It returns nil, having closed c, if
// there is no room.
func (l *Listener) admit(c net.Conn) *Conn {
	wc := &Conn{Conn: c, l: l, addr: AddrOf(c.RemoteAddr())}
	wc.key = ClientKey(wc.addr)
	wc.count = l.o.MaxPerClient > 0 && !l.trusted(wc.addr)
	wc.idleSince.Store(time.Now().UnixNano())
	for {
		perClient, full, reserve := l.tryAdmit(wc)
		if !perClient && !full {
			if reserve {
				l.say(saidReserve, "a connection is admitted into the reserve: it is served only for "+strings.Join(l.o.ReservedPaths, ", "),
					zap.String("client", wc.addr.String()))
			}
			return wc
		}
		same := func(o *Conn) bool { return !perClient || o.key == wc.key }
		if !l.evict(same) {
			l.say(saidRefused, "a connection is refused: too many open, none idle or still sending its request (http.max_connections, http.max_connections_per_client)",
				zap.String("client", wc.addr.String()), zap.Bool("per_client", perClient))
			c.Close()
			return nil
		}
	}
}

// tryAdmit registers wc if its client and the listener have room, in the
// reserve if only that has; it reports which bound stopped it, and
// whether wc went in the reserve.
func (l *Listener) tryAdmit(wc *Conn) (perClient, full, reserve bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	perClient = wc.count && l.perAddr[wc.key] >= l.o.MaxPerClient
	full = l.o.Max > 0 && len(l.conns)-l.reserved >= l.o.Max-l.o.Reserve
	if full && !perClient && l.reserved < l.o.Reserve && !l.evictable() {
		full, reserve, wc.reserve = false, true, true
		l.reserved++
	}
	if perClient || full {
		return perClient, full, false
	}
	l.conns[wc] = struct{}{}
	if wc.count {
		l.perAddr[wc.key]++
	}
	return false, false, reserve
}

// evictable reports whether some connection may be closed for room (l.mu
// held): the reserve is used only when none may.
func (l *Listener) evictable() bool {
	for c := range l.conns {
		if c.idleSince.Load() != 0 || c.readingSince.Load() != 0 {
			return true
		}
	}
	return false
}

// evict closes the idlest idle connection that may go, else the one that
// has been sending its request the longest (a slow head holds its
// connection as long as the server lets it), and reports whether there was
// one.
func (l *Listener) evict(may func(*Conn) bool) bool {
	victim, why := l.oldest(may, (*Conn).idle), "the idlest idle connection is closed to make room for another"
	if victim == nil {
		victim, why = l.oldest(may, (*Conn).reading), "the connection sending its request the longest is closed to make room for another"
	}
	if victim == nil {
		return false
	}
	l.say(saidEvicted, why, zap.String("client", victim.addr.String()))
	victim.Close()
	return true
}

// oldest returns the connection that may go whose since is earliest (and
// not 0), or nil.
func (l *Listener) oldest(may func(*Conn) bool, since func(*Conn) int64) *Conn {
	var victim *Conn
	var first int64
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		if t := since(c); t != 0 && may(c) && (victim == nil || t < first) {
			victim, first = c, t
		}
	}
	return victim
}

func (c *Conn) idle() int64    { return c.idleSince.Load() }
func (c *Conn) reading() int64 { return c.readingSince.Load() }

// forget gives c's room back.
func (l *Listener) forget(c *Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.conns[c]; !ok {
		return
	}
	delete(l.conns, c)
	if c.reserve {
		l.reserved--
	}
	if c.count {
		if l.perAddr[c.key]--; l.perAddr[c.key] <= 0 {
			delete(l.perAddr, c.key)
		}
	}
}

// ConnState is the server's ConnState: it notes which connections are
// idle (between requests), which are sending a request (from its first
// byte until the handler has it: Handler), and which are busy (served,
// or hijacked for an event stream).
func (l *Listener) ConnState(c net.Conn, st fasthttp.ConnState) {
	wc := unwrap(c)
	if wc == nil {
		return
	}
	switch st {
	case fasthttp.StateIdle:
		wc.readingSince.Store(0)
		wc.idleSince.Store(time.Now().UnixNano())
	case fasthttp.StateActive:
		wc.idleSince.Store(0)
		wc.readingSince.Store(time.Now().UnixNano())
	case fasthttp.StateHijacked:
		wc.idleSince.Store(0)
		wc.readingSince.Store(0)
	case fasthttp.StateClosed:
		wc.once.Do(func() { l.forget(wc) })
	}
}

// Handler wraps the server's handler: it notes that the request has been
// read (its connection is no longer one to close for room), and answers a
// connection in the reserve 503 and closes it unless the path is one of
// ReservedPaths. Serve with it, or every request being served counts as
// one still being sent.
func (l *Listener) Handler(h fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		wc := unwrap(ctx.Conn())
		if wc != nil {
			wc.readingSince.Store(0)
		}
		if wc != nil && wc.reserve && !slices.Contains(l.o.ReservedPaths, string(ctx.Path())) {
			ctx.Error("too many connections: this one is kept for "+strings.Join(l.o.ReservedPaths, ", "), fasthttp.StatusServiceUnavailable)
			ctx.SetConnectionClose() // after Error, which resets the response (before, the connection stayed, holding the reserve)
			return
		}
		h(ctx)
	}
}

// Len returns how many connections are held.
func (l *Listener) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// unwrap finds the Conn under wrappers that give theirs (NetConn).
func unwrap(c net.Conn) *Conn {
	for c != nil {
		if wc, ok := c.(*Conn); ok {
			return wc
		}
		n, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = n.NetConn()
	}
	return nil
}

func (l *Listener) trusted(a netip.Addr) bool {
	for _, p := range l.o.Trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// AddrOf returns the IP of a peer's address (IPv4 in IPv6 unmapped), or
// the zero Addr.
func AddrOf(a net.Addr) netip.Addr {
	if t, ok := a.(*net.TCPAddr); ok { // no string made: it runs for every request
		ip, _ := netip.AddrFromSlice(t.IP)
		return ip.Unmap()
	}
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// ReadTimeouts bounds reading a request on srv: its head within head,
// from its first byte (a new connection's from its accept), its body
// within body after. fasthttp's ReadTimeout alone bounds both together, so
// that a head sent a byte a second held its connection for the whole of
// it.
func ReadTimeouts(srv *fasthttp.Server, head, body time.Duration) {
	srv.ReadTimeout = head
	srv.HeaderReceived = func(*fasthttp.RequestHeader) fasthttp.RequestConfig {
		return fasthttp.RequestConfig{ReadTimeout: body}
	}
}

// ClientKey is what the per-client bound counts by: an IPv4 address, or
// an IPv6 address's /64 (one host's share of addresses: a client that
// takes a fresh address for each connection stays one client).
func ClientKey(a netip.Addr) netip.Addr {
	if a.Is6() && !a.Is4In6() {
		if p, err := a.Prefix(64); err == nil {
			return p.Addr()
		}
	}
	return a
}

// say logs a line of a kind at most once a minute.
func (l *Listener) say(kind int, msg string, fields ...zap.Field) {
	if l.o.Log == nil {
		return
	}
	now := time.Now().Unix()
	if last := l.said[kind].Load(); now-last < 60 || !l.said[kind].CompareAndSwap(last, now) {
		return
	}
	l.o.Log.Warn(msg, fields...)
}

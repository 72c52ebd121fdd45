// Package connlimit keeps a server accepting connections through a
// shortage of file descriptors, and bounds the connections it holds: in
// all, and per client address, closing the idlest idle connection to make
// room for a new one.
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

	mu      sync.Mutex
	conns   map[*Conn]struct{}
	perAddr map[netip.Addr]int
	said    [3]atomic.Int64 // when each kind of log line was last written (unix seconds)
}

// Kinds of log line, each said at most once a minute.
const (
	saidAccept = iota
	saidRefused
	saidEvicted
)

// New returns ln bounded by o, and by the process's descriptor limit less
// a quarter of it (DescriptorBound): the rest is for what the process
// opens itself (stdio servers' pipes, upstream connections, files), which
// connections held up to the limit would starve.
func New(ln net.Listener, o Options) *Listener {
	if most, ok := DescriptorBound(); ok && (o.Max <= 0 || o.Max > most) {
		if o.Log != nil {
			o.Log.Info("connections bounded below the process's descriptor limit", zap.Int("configured", o.Max), zap.Int("bound", most))
		}
		o.Max = most
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
	l     *Listener
	addr  netip.Addr
	count bool // counted against MaxPerClient
	once  sync.Once
	// idleSince is when the connection last became idle (unix nanoseconds;
	// a new one is idle from its accept), 0 while a request is served or
	// the connection is hijacked (an event stream).
	idleSince atomic.Int64
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

// admit registers c within the bounds, closing the idlest idle connection
// (of c's address, for its bound) to make room; it returns nil, having
// closed c, if there is none.
func (l *Listener) admit(c net.Conn) *Conn {
	wc := &Conn{Conn: c, l: l, addr: AddrOf(c.RemoteAddr())}
	wc.count = l.o.MaxPerClient > 0 && !l.trusted(wc.addr)
	wc.idleSince.Store(time.Now().UnixNano())
	for {
		l.mu.Lock()
		perClient := wc.count && l.perAddr[wc.addr] >= l.o.MaxPerClient
		full := l.o.Max > 0 && len(l.conns) >= l.o.Max
		if !perClient && !full {
			l.conns[wc] = struct{}{}
			if wc.count {
				l.perAddr[wc.addr]++
			}
			l.mu.Unlock()
			return wc
		}
		l.mu.Unlock()
		same := func(o *Conn) bool { return !perClient || o.addr == wc.addr }
		if !l.evict(same) {
			l.say(saidRefused, "a connection is refused: too many open, none idle (http.max_connections, http.max_connections_per_client)",
				zap.String("client", wc.addr.String()), zap.Bool("per_client", perClient))
			c.Close()
			return nil
		}
	}
}

// evict closes the idlest idle connection that may goes, and reports
// whether there was one.
func (l *Listener) evict(may func(*Conn) bool) bool {
	var victim *Conn
	l.mu.Lock()
	for c := range l.conns {
		since := c.idleSince.Load()
		if since != 0 && may(c) && (victim == nil || since < victim.idleSince.Load()) {
			victim = c
		}
	}
	l.mu.Unlock()
	if victim == nil {
		return false
	}
	l.say(saidEvicted, "the idlest idle connection is closed to make room for another", zap.String("client", victim.addr.String()))
	victim.Close()
	return true
}

// forget gives c's room back.
func (l *Listener) forget(c *Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.conns[c]; !ok {
		return
	}
	delete(l.conns, c)
	if c.count {
		if l.perAddr[c.addr]--; l.perAddr[c.addr] <= 0 {
			delete(l.perAddr, c.addr)
		}
	}
}

// ConnState is the server's ConnState: it notes which connections are
// idle (between requests); one that serves a request or was hijacked (an
// event stream) is not.
func (l *Listener) ConnState(c net.Conn, st fasthttp.ConnState) {
	wc := unwrap(c)
	if wc == nil {
		return
	}
	switch st {
	case fasthttp.StateIdle:
		wc.idleSince.Store(time.Now().UnixNano())
	case fasthttp.StateActive, fasthttp.StateHijacked:
		wc.idleSince.Store(0)
	case fasthttp.StateClosed:
		wc.once.Do(func() { l.forget(wc) })
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
	if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
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

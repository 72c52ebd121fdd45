package connlimit

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/leaktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leaktest.ProcessWide...) }

// server is a loopback server bounded by a Listener.
type server struct {
	addr string
	l    *Listener
	mu   sync.Mutex
	idle map[string]chan struct{} // by client address: a value each time the server has marked its connection idle
	// active: by client address, a value each time the server has seen a
	// request's first byte on its connection
	active map[string]chan struct{}
}

// activeOf returns the channel of the connection from the client address a.
func (s *server) activeOf(a string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.active[a]
	if ch == nil {
		ch = make(chan struct{}, 16)
		s.active[a] = ch
	}
	return ch
}

// idleOf returns the channel of the connection from the client address a.
func (s *server) idleOf(a string) chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.idle[a]
	if ch == nil {
		ch = make(chan struct{}, 16)
		s.idle[a] = ch
	}
	return ch
}

// serve serves "ok" on a loopback listener bounded by o until the test
// ends.
func serve(t *testing.T, o Options) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{addr: ln.Addr().String(), l: New(ln, o), idle: map[string]chan struct{}{}, active: map[string]chan struct{}{}}
	srv := &fasthttp.Server{Handler: s.l.Handler(func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") }),
		ConnState: func(c net.Conn, st fasthttp.ConnState) {
			s.l.ConnState(c, st)
			switch st {
			case fasthttp.StateIdle:
				s.idleOf(c.RemoteAddr().String()) <- struct{}{}
			case fasthttp.StateActive:
				s.activeOf(c.RemoteAddr().String()) <- struct{}{}
			}
		}}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(s.l) }()
	t.Cleanup(func() { srv.Shutdown(); <-done })
	return s
}

// client is one keep-alive connection to the server.
type client struct {
	c      net.Conn
	rd     *bufio.Reader
	idle   chan struct{} // the server's marks of this connection idle
	active chan struct{} // the server's marks of this connection sending a request
}

func dial(t *testing.T, s *server) *client {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	a := c.LocalAddr().String()
	return &client{c: c, rd: bufio.NewReader(c), idle: s.idleOf(a), active: s.activeOf(a)}
}

// startHead sends the first bytes of a request head and waits until the
// server has seen them: the connection is sending its request.
func (cl *client) startHead(t *testing.T) {
	t.Helper()
	io.WriteString(cl.c, "GET / HT")
	select {
	case <-cl.active:
	case <-time.After(10 * time.Second): // bounds the test
		t.Fatal("the server did not see the head's first bytes")
	}
}

// get makes a request, reads its answer whole and waits until the server
// has marked the connection idle again (the client reads the answer before
// the server notes it, and which connection is the idlest depends on
// that); it reports false if the server closed the connection instead.
func (cl *client) get() bool { return cl.getPath("/") }

// getPath is get for a path.
func (cl *client) getPath(path string) bool {
	io.WriteString(cl.c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
	var resp fasthttp.Response
	if resp.Read(cl.rd) != nil || string(resp.Body()) != "ok" {
		return false
	}
	select {
	case <-cl.idle:
		return true
	case <-time.After(10 * time.Second): // bounds the test: it fails
		return false
	}
}

// closed reports whether the server has closed the connection: a read
// gets the end of the stream (within 10 s, or the test fails).
func (cl *client) closed() bool {
	cl.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer cl.c.SetReadDeadline(time.Time{})
	_, err := cl.rd.ReadByte()
	return errors.Is(err, io.EOF) || err != nil && strings.Contains(err.Error(), "reset")
}

// TestIdlestIdleConnectionMakesRoom: at the bound, a new connection is
// served and the idlest idle one is closed for it.
func TestIdlestIdleConnectionMakesRoom(t *testing.T) {
	s := serve(t, Options{Max: 2})
	a, b := dial(t, s), dial(t, s)
	if !a.get() || !b.get() { // a is idle first, then b
		t.Fatal("the first two connections are not served")
	}
	c := dial(t, s)
	if !c.get() {
		t.Fatal("a connection at the bound is not served")
	}
	if !a.closed() {
		t.Error("the idlest idle connection was not closed for the new one")
	}
	if !b.get() {
		t.Error("the other idle connection was closed")
	}
	if n := s.l.Len(); n > 2 {
		t.Errorf("%d connections held, bound 2", n)
	}
}

// TestPerClientBound: one address holds at most MaxPerClient connections
// (its idlest idle one closed for a new one), unless it is a trusted proxy.
func TestPerClientBound(t *testing.T) {
	s := serve(t, Options{MaxPerClient: 1})
	a := dial(t, s)
	if !a.get() {
		t.Fatal("not served")
	}
	b := dial(t, s)
	if !b.get() || !a.closed() {
		t.Error("the client's own idle connection was not closed for its new one")
	}
	trusted := serve(t, Options{MaxPerClient: 1, Trusted: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
	x, y := dial(t, trusted), dial(t, trusted)
	if !x.get() || !y.get() || !x.get() {
		t.Error("a trusted proxy's connections were bounded per client")
	}
}

// TestRefusedWhenNoneIdle: at the bound with every connection busy, a new
// one is closed at once, and the others are not touched.
func TestRefusedWhenNoneIdle(t *testing.T) {
	s := serve(t, Options{Max: 1})
	l := s.l
	a := dial(t, s)
	if !a.get() {
		t.Fatal("not served")
	}
	l.mu.Lock()
	for c := range l.conns { // busy: as a request being served, or an event stream
		c.idleSince.Store(0)
	}
	l.mu.Unlock()
	b := dial(t, s)
	if b.get() {
		t.Error("a connection beyond the bound was served with none idle")
	}
	l.mu.Lock()
	for c := range l.conns {
		c.idleSince.Store(1)
	}
	l.mu.Unlock()
	if !a.get() {
		t.Error("the busy connection was closed")
	}
}

// flaky fails its first accepts with err, then accepts from next.
type flaky struct {
	net.Listener
	fails int
	err   error
	next  chan net.Conn
}

func (f *flaky) Accept() (net.Conn, error) {
	if f.fails > 0 {
		f.fails--
		return nil, f.err
	}
	return <-f.next, nil
}

// TestConnIsTheSocket: a Conn gives its socket to what watches it (the
// front's close watcher, which sees a client's close of its stream, the
// cancel of 2026-07-28): without it, no such close was seen behind the
// bounded listener.
func TestConnIsTheSocket(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(ln, Options{})
	defer l.Close()
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			c.Close()
		}
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc, ok := c.(syscall.Conn)
	if !ok {
		t.Fatal("a Conn is no syscall.Conn")
	}
	if _, err := sc.SyscallConn(); err != nil {
		t.Errorf("SyscallConn: %v", err)
	}
}

// TestAcceptGoesOnThroughShortages: accepts that fail for want of
// descriptors (EMFILE, ENFILE), memory or a client that left are tried
// again, and the next connection is served: fasthttp's Serve returned on
// the first, and the sidecar stopped (issue 40, item 2). A failure of
// another kind ends Accept.
func TestAcceptGoesOnThroughShortages(t *testing.T) {
	for _, err := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		server, peer := net.Pipe()
		defer peer.Close()
		f := &flaky{fails: 3, err: &net.OpError{Op: "accept", Err: err}, next: make(chan net.Conn, 1)}
		f.next <- server
		l := New(f, Options{})
		c, aerr := l.Accept()
		if aerr != nil || c.(*Conn).Conn != server {
			t.Errorf("%v: Accept = %v, %v; want the connection after the failures", err, c, aerr)
		}
		if c != nil {
			c.Close()
		}
	}
	f := &flaky{fails: 1, err: errors.New("the listener broke")}
	if _, err := New(f, Options{}).Accept(); err == nil {
		t.Error("a permanent failure did not end Accept")
	}
}

// TestOutOfDescriptorsClosesTheIdlest: when an accept fails for want of
// descriptors, the idlest idle connection is closed to free one.
func TestOutOfDescriptorsClosesTheIdlest(t *testing.T) {
	server, peer := net.Pipe()
	defer peer.Close()
	next, nextPeer := net.Pipe()
	defer nextPeer.Close()
	f := &flaky{next: make(chan net.Conn, 2)}
	f.next <- server
	l := New(f, Options{})
	idle, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	f.fails, f.err = 1, &net.OpError{Op: "accept", Err: syscall.EMFILE}
	f.next <- next
	if c, err := l.Accept(); err != nil || c.(*Conn).Conn != next {
		t.Fatalf("after EMFILE: %v, %v", c, err)
	}
	if l.Len() != 1 {
		t.Errorf("%d connections held, want the idle one closed", l.Len())
	}
	idle.Close()
}

// TestSlowHeadsMakeRoom: at the bound with every connection sending a
// request head that never ends (a byte a second), a new connection is
// served, and the one that has been sending the longest is closed for it.
// Before, only idle connections were closed for room: the new one was
// refused, and slow heads from a few addresses locked every client out.
func TestSlowHeadsMakeRoom(t *testing.T) {
	s := serve(t, Options{Max: 2})
	a, b := dial(t, s), dial(t, s)
	a.startHead(t)
	b.startHead(t)
	c := dial(t, s)
	if !c.get() {
		t.Fatal("a connection was refused while slow heads held every other")
	}
	if !a.closed() {
		t.Error("the oldest unfinished head was not closed for the new connection")
	}
	if n := s.l.Len(); n > 2 {
		t.Errorf("%d connections held, bound 2", n)
	}
	// Per client: one address's slow heads make room for its own.
	p := serve(t, Options{MaxPerClient: 1})
	x := dial(t, p)
	x.startHead(t)
	if y := dial(t, p); !y.get() || !x.closed() {
		t.Error("a client's own slow head was not closed for its new connection")
	}
}

// TestReserveServesHealth: with every connection busy (none idle, none
// still sending), a connection goes in the reserve, where it is served for
// the reserved paths only: a liveness probe answers under an attack that
// holds every other connection.
func TestReserveServesHealth(t *testing.T) {
	s := serve(t, Options{Max: 3, Reserve: 1, ReservedPaths: []string{"/healthz", "/readyz"}})
	a, b := dial(t, s), dial(t, s)
	if !a.get() || !b.get() {
		t.Fatal("not served")
	}
	busy := func(v int64) {
		s.l.mu.Lock()
		defer s.l.mu.Unlock()
		for c := range s.l.conns { // as requests being served, or event streams
			c.idleSince.Store(v)
		}
	}
	busy(0)
	other := dial(t, s)
	if other.getPath("/mcp") {
		t.Error("a connection in the reserve was served for another path")
	}
	// The server closes it, giving its room back (Conn.Close) before the
	// client reads the close: the probe then finds the reserve free. Before,
	// the refusal's Connection: close was lost (ctx.Error resets the
	// response): the refused connection stayed in the reserve, and the
	// probe got in only when it found that one idle in time (48 of 50 runs).
	if !other.closed() {
		t.Fatal("the server did not close the connection it refused")
	}
	probe := dial(t, s)
	if !probe.getPath("/healthz") || !probe.getPath("/readyz") {
		t.Error("the reserve did not serve the health probe")
	}
	busy(0)
	if over := dial(t, s); over.getPath("/healthz") {
		t.Error("a connection beyond the reserve was served")
	}
	busy(1)
	if !a.get() {
		t.Error("a busy connection was closed")
	}
}

// TestPerClientCappedAtHalfTheBound: one client holds at most half of the
// connections the descriptor limit allows, whatever is configured: under a
// limit of 1,024 one address took every connection before.
func TestPerClientCappedAtHalfTheBound(t *testing.T) {
	most, ok := DescriptorBound()
	if !ok {
		t.Skip("no descriptor limit here")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, configured := range []int{0, 1 << 30} {
		if l := New(ln, Options{MaxPerClient: configured}); l.o.MaxPerClient != max(most/2, 1) {
			t.Errorf("max_connections_per_client %d: bound %d, want %d", configured, l.o.MaxPerClient, most/2)
		}
	}
	if l := New(ln, Options{MaxPerClient: 3}); l.o.MaxPerClient != 3 {
		t.Errorf("a bound under half was changed to %d", l.o.MaxPerClient)
	}
}

// TestClientKey: IPv6 clients are counted by their /64, IPv4 by address.
func TestClientKey(t *testing.T) {
	k := func(s string) netip.Addr { return ClientKey(netip.MustParseAddr(s)) }
	if k("2001:db8::1") != k("2001:db8::ffff:1") {
		t.Error("two addresses of one /64 are two clients")
	}
	if k("2001:db8::1") == k("2001:db8:0:1::1") {
		t.Error("two /64s are one client")
	}
	if k("192.0.2.1") == k("192.0.2.2") || k("192.0.2.1") != netip.MustParseAddr("192.0.2.1") {
		t.Error("IPv4 clients are not counted by address")
	}
}

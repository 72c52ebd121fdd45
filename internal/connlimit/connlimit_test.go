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
	s := &server{addr: ln.Addr().String(), l: New(ln, o), idle: map[string]chan struct{}{}}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") },
		ConnState: func(c net.Conn, st fasthttp.ConnState) {
			s.l.ConnState(c, st)
			if st == fasthttp.StateIdle {
				s.idleOf(c.RemoteAddr().String()) <- struct{}{}
			}
		}}
	done := make(chan struct{})
	go func() { defer close(done); srv.Serve(s.l) }()
	t.Cleanup(func() { srv.Shutdown(); <-done })
	return s
}

// client is one keep-alive connection to the server.
type client struct {
	c    net.Conn
	rd   *bufio.Reader
	idle chan struct{} // the server's marks of this connection idle
}

func dial(t *testing.T, s *server) *client {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{c: c, rd: bufio.NewReader(c), idle: s.idleOf(c.LocalAddr().String())}
}

// get makes a request, reads its answer whole and waits until the server
// has marked the connection idle again (the client reads the answer before
// the server notes it, and which connection is the idlest depends on
// that); it reports false if the server closed the connection instead.
func (cl *client) get() bool {
	io.WriteString(cl.c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
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

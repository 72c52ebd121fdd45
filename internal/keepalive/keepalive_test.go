package keepalive

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/goleak"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/leaktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leaktest.ProcessWide...) }

// idleClosingServer is a net/http server on loopback that closes a
// connection unused for a second, as Node's and uvicorn's do after five,
// and counts the requests it read; closed is told of each connection it
// closes.
type idleClosingServer struct {
	srv      *http.Server
	addr     string
	requests atomic.Int32
	closed   chan struct{}
	done     chan struct{}

	mu     sync.Mutex
	bodies []string // the bodies it read, in order
}

// read returns the bodies the server read.
func (s *idleClosingServer) read() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.bodies)
}

func newIdleClosingServer(t *testing.T, h http.HandlerFunc) *idleClosingServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &idleClosingServer{addr: ln.Addr().String(), closed: make(chan struct{}, 16), done: make(chan struct{})}
	s.srv = &http.Server{
		IdleTimeout: time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			s.mu.Lock()
			s.bodies = append(s.bodies, string(body))
			s.mu.Unlock()
			s.requests.Add(1)
			if h != nil {
				h(w, r)
				return
			}
			io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{}}`)
		}),
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed || st == http.StateHijacked {
				s.closed <- struct{}{}
			}
		},
	}
	go func() { defer close(s.done); s.srv.Serve(ln) }()
	t.Cleanup(func() { s.srv.Close(); <-s.done })
	return s
}

// newClient returns a client as the proxy makes its clients: Installed,
// its connections Wrapped.
func newClient() *fasthttp.Client {
	c := &fasthttp.Client{Dial: Dial(nil), StreamResponseBody: true}
	Install(c, 0)
	return c
}

// post sends body to the server and returns the answer's body.
func post(c *fasthttp.Client, addr string, body io.Reader) (string, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + addr + "/mcp")
	req.Header.SetMethod(fasthttp.MethodPost)
	if r, ok := body.(*rewindable); ok {
		req.SetBodyStream(r, r.Rewind())
	} else {
		b, _ := io.ReadAll(body)
		req.SetBody(b)
	}
	if err := c.Do(req, resp); err != nil {
		return "", err
	}
	b, err := io.ReadAll(resp.BodyStream())
	return string(b), err
}

// rewindable is a body stream that can be sent again.
type rewindable struct {
	strings.Reader
	s       string
	rewinds int
}

func (r *rewindable) Rewind() int { r.rewinds++; r.Reset(r.s); return len(r.s) }

// TestRequestAfterTheServerClosedIdleConnection: the server closes the
// connection the first request used; the second request, a POST whose
// body is a stream (as the relay's and the bridge's are), goes on a new
// connection and is read once, with its whole body. On fasthttp alone it
// fails with "the server closed connection before returning the first
// response byte"; and since fasthttp drops a body stream once it has
// copied it, whether the write then fails or not, the request was sent
// again with an empty body (Content-Length: 0), which a server refuses.
func TestRequestAfterTheServerClosedIdleConnection(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(map[bool]string{false: "bytes", true: "stream"}[stream], func(t *testing.T) {
			s := newIdleClosingServer(t, nil)
			c := newClient()
			defer c.CloseIdleConnections()
			body := func() io.Reader {
				const msg = `{"jsonrpc":"2.0","id":1,"method":"tools/call"}`
				if stream {
					return &rewindable{s: msg}
				}
				return strings.NewReader(msg)
			}
			if _, err := post(c, s.addr, body()); err != nil {
				t.Fatal(err)
			}
			<-s.closed // the server closed the idle connection (after its second)
			if _, err := post(c, s.addr, body()); err != nil {
				t.Fatalf("the request after the server's idle close: %v", err)
			}
			const msg = `{"jsonrpc":"2.0","id":1,"method":"tools/call"}`
			if got := s.read(); !slices.Equal(got, []string{msg, msg}) {
				t.Fatalf("the server read %q, want the request twice, whole", got)
			}
		})
	}
}

// TestNeverSentAgainOnceWritten: a server that reads a request whole and
// closes the connection without a byte of answer has the request: the
// client gets the error, and the request is not sent again.
func TestNeverSentAgainOnceWritten(t *testing.T) {
	s := newIdleClosingServer(t, func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	c := newClient()
	defer c.CloseIdleConnections()
	r := &rewindable{s: `{"jsonrpc":"2.0","id":1,"method":"tools/call"}`}
	if _, err := post(c, s.addr, r); err == nil {
		t.Fatal("a request the server read and closed on without an answer succeeded")
	}
	if n := s.requests.Load(); n != 1 {
		t.Fatalf("the server read the request %d times, want once", n)
	}
	if r.rewinds != 1 { // the one of post
		t.Fatalf("the body was rewound %d times for sending again, want none", r.rewinds-1)
	}
}

// TestKeepAliveTimeoutHonoured: a connection unused past what the server's
// Keep-Alive: timeout= allows is not written to; one within it is.
func TestKeepAliveTimeoutHonoured(t *testing.T) {
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	resp.Header.DisableNormalizing()
	resp.Header.Set("keep-alive", "timeout=2, max=100")
	const addr = "keepalive.test:80"
	noteKeepAlive(addr, resp)
	if got := time.Duration(hostOf(addr).limit.Load()); got != time.Second {
		t.Fatalf("timeout=2 retires after %v, want 1s", got)
	}
	var clock atomic.Int64
	c := Wrap(addr, nopConn{})
	c.now = clock.Load
	c.Read(make([]byte, 1)) // a response read at 0
	clock.Store(int64(999 * time.Millisecond))
	if _, err := c.Write([]byte("GET")); err != nil {
		t.Fatalf("a connection unused for 999ms of 1s: %v", err)
	}
	c.Read(nil)
	clock.Add(int64(time.Second))
	_, err := c.Write([]byte("GET"))
	if !IsNotSent(err) {
		t.Fatalf("a connection unused for 1s of 1s: %v, want a NotSentError", err)
	}
	if _, err := c.Write([]byte("GET")); err != nil { // the rest of the same request
		t.Fatalf("a second write of one request: %v", err)
	}
}

// TestKeepAliveHeader parses the header's timeout as servers write it.
func TestKeepAliveHeader(t *testing.T) {
	for v, want := range map[string]int{"timeout=5": 5, "timeout=5, max=1000": 5, "max=3, Timeout = 7": 7,
		`timeout="9"`: 9, "timeout=0": 0, "timeout=-1": 0, "timeout=x": 0, "max=5": 0, "": 0, "timeout=999999999": 0} {
		if got, _ := keepAliveTimeout([]byte(v)); got != want {
			t.Errorf("%q: %d, want %d", v, got, want)
		}
	}
	if got := retireBy(5 * time.Second); got != 4*time.Second {
		t.Errorf("timeout=5 retires after %v", got)
	}
	if got := retireBy(time.Second); got != 500*time.Millisecond {
		t.Errorf("timeout=1 retires after %v", got)
	}
}

// nopConn reads and writes nothing, at once.
type nopConn struct{ net.Conn }

func (nopConn) Read([]byte) (int, error)    { return 0, nil }
func (nopConn) Write(p []byte) (int, error) { return len(p), nil }

// failingConn fails every write.
type failingConn struct{ net.Conn }

func (failingConn) Write([]byte) (int, error) { return 0, syscall.EPIPE }

// TestFailedWriteIsNotSent: a write that fails is a request the server
// cannot have read whole; a write that timed out is not (the server reads,
// slowly).
func TestFailedWriteIsNotSent(t *testing.T) {
	c := Wrap("failing.test:80", failingConn{})
	if _, err := c.Write([]byte("POST")); !IsNotSent(err) || !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("a failed write: %v", err)
	}
	client, server := net.Pipe()
	defer client.Close()
	defer server.Close()
	client.SetWriteDeadline(time.Now().Add(-time.Second))
	if _, err := Wrap("pipe.test:80", client).Write([]byte("POST")); IsNotSent(err) || err == nil {
		t.Fatalf("a write past its deadline: %v", err)
	}
}

// TestIdleConnectionsRetired: Install sets the client's idle time below
// the 5 s of Node's and uvicorn's servers, unless told another.
func TestIdleConnectionsRetired(t *testing.T) {
	var c fasthttp.Client
	Install(&c, 0)
	if c.MaxIdleConnDuration != DefaultIdle || DefaultIdle >= 5*time.Second {
		t.Fatalf("idle connections kept for %v", c.MaxIdleConnDuration)
	}
	Install(&c, 2*time.Second)
	if c.MaxIdleConnDuration != 2*time.Second {
		t.Fatalf("idle connections kept for %v, want 2s", c.MaxIdleConnDuration)
	}
}

// TestTLSCloseWhileReading: closing a TLS connection writes its
// close_notify; while another goroutine is blocked reading the connection
// (an idle event stream, which the bridge closes when its client leaves,
// or the relay closes to cancel a 2026-07-28 call), that write must not
// wait for the read. Before, it peeked at the socket under the read's own
// lock, and Close waited until the server next sent something: the bridge
// to an HTTPS server never exited.
func TestTLSCloseWhileReading(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // silent until the client leaves
	}))
	srv.StartTLS()
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var clock atomic.Int64
	clock.Store(int64(time.Second)) // readAt 0 means no read
	kc := Wrap(addr, raw)
	kc.now = clock.Load
	conf := srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	conf.ServerName = "example.com" // httptest's certificate's
	tc := tls.Client(kc, conf)
	defer tc.Close()
	if _, err := io.WriteString(tc, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(tc)
	for line := ""; line != "\r\n"; {
		if line, err = br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	clock.Add(int64(time.Second)) // past peekAfter: a write after this read would be checked
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		br.ReadByte() // blocks: the stream is silent
	}()
	waitBlockedIn(t, "keepalive.(*Conn).Read", "runtime_pollWait")
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		tc.Close()
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Error("Close waited for the blocked Read")
		srv.CloseClientConnections() // lets both go
		<-closed
	}
	<-readDone
}

// waitBlockedIn waits until a goroutine's stack names every one of frames.
func waitBlockedIn(t *testing.T, frames ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	buf := make([]byte, 1<<20)
	for time.Now().Before(deadline) {
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if containsAll(g, frames) {
				return
			}
		}
		runtime.Gosched()
	}
	t.Fatalf("no goroutine blocked in %v", frames)
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// TestUnsent: the one test of "nothing of the request reached the server".
// A dial that failed, a connection found closed or stale, a write that
// failed: unsent. A connection closed or reset after the request was
// written, a timeout, a broken answer: it may have run.
func TestUnsent(t *testing.T) {
	refused := func() error { // a port nothing listens on
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		_, err = Dial(nil)(addr)
		return err
	}()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"dial refused", refused, true},
		{"dial refused, wrapped", fmt.Errorf("posting: %w", refused), true},
		{"stale connection", &NotSentError{Reason: "the server had closed its connection"}, true},
		{"failed write", &NotSentError{Reason: "writing it failed", Err: syscall.EPIPE}, true},
		{"dial timeout", fasthttp.ErrDialTimeout, true},
		{"TLS handshake timeout", fasthttp.ErrTLSHandshakeTimeout, true},
		{"TLS certificate", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, true},
		{"closed after the request", fasthttp.ErrConnectionClosed, false},
		{"reset after the request", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, false},
		{"timeout", fasthttp.ErrTimeout, false},
		{"cut short", io.ErrUnexpectedEOF, false},
		{"none", nil, false},
	}
	for _, tt := range tests {
		if got := Unsent(tt.err); got != tt.want {
			t.Errorf("%s: Unsent(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
	if refused == nil || !IsNotSent(refused) || resendable(refused) {
		t.Errorf("a refused dial: %v; it is unsent, and not sent again", refused)
	}
}

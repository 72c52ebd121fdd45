// Package keepalive keeps the proxy's HTTP clients from sending a request
// on a connection that its server has closed, or is about to close, for
// being unused.
//
// Node's HTTP server (the TypeScript SDK, server-everything, Express) and
// uvicorn (FastMCP) close a keep-alive connection idle for 5 s. fasthttp
// keeps idle connections for 10 s by default and sends the next request on
// whichever it takes from its pool; on one the server has closed, the
// request fails with "the server closed connection before returning the
// first response byte", and fasthttp never sends again a POST, nor any
// request whose body is a stream. So three things here:
//
//   - Install retires a client's idle connections after Idle (DefaultIdle,
//     below those servers' 5 s);
//   - a connection (Wrap) looks, before the first byte of a request on a
//     used connection, whether the server has closed it (a FIN, a reset or
//     stray bytes waiting: a non-blocking peek, where the platform has one)
//     or whether it has been unused for longer than the server's own
//     Keep-Alive: timeout= allows; if so, it writes nothing and fails the
//     write with a NotSentError;
//   - the transport Install adds sends a request again, on another
//     connection, when it failed with a NotSentError: its bytes never left,
//     or its write failed and so the server cannot have read it whole.
//
// A request whose bytes may have been read is never sent again: no
// response byte is not proof that the server did not read it (RFC 9112
// §9.3.1), and a resent tools/call may run paid work twice.
package keepalive

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// DefaultIdle is how long a client keeps a connection unused before it
// closes it: below the 5 s after which Node's HTTP server and uvicorn
// close theirs.
const DefaultIdle = 4 * time.Second

// peekAfter is how long a connection must have been unused before it is
// looked at for the server's close: a server closes for idleness only, and
// the look costs a system call.
const peekAfter = 100 * time.Millisecond

// maxResends bounds how often one request is sent again: each stale
// connection in the pool costs one.
const maxResends = 8

// NotSentError is a request that did not reach its server: its connection
// was found closed, or unused past the server's keep-alive timeout, before
// any of its bytes was written, or a write of it failed (so the server
// cannot have read it whole). Sending it again cannot run it twice.
type NotSentError struct {
	// Reason says why, in a few words.
	Reason string
	// Err is the write's error, if a write failed, or the dial's.
	Err error
	// dial: the connection could not be opened (Dial).
	dial bool
}

func (e *NotSentError) Error() string {
	if e.Err != nil {
		return "the request was not sent: " + e.Reason + ": " + e.Err.Error()
	}
	return "the request was not sent: " + e.Reason
}

func (e *NotSentError) Unwrap() error { return e.Err }

// IsNotSent reports whether err is, or wraps, a NotSentError.
func IsNotSent(err error) bool {
	var ns *NotSentError
	return errors.As(err, &ns)
}

// DialFailed wraps the error of a dial function whose connection could not
// be opened: no request on it was sent. Nil stays nil.
func DialFailed(err error) error {
	if err == nil {
		return nil
	}
	return &NotSentError{Reason: "its connection could not be opened", Err: err, dial: true}
}

// Unsent reports whether err, the failure of a request sent through a
// client this package Installed, proves that no byte of the request
// reached its server: its connection could not be opened (dialled, or
// its TLS handshake failed), was found closed or stale before the request
// was written, or the request's write failed. It is the one test of "it
// cannot have run": a request is sent again, or its client told that the
// server cannot have run it, only when it holds. Any other failure (the
// connection closed or reset after the request was written, a timeout, a
// broken answer) may follow a request the server read and ran.
func Unsent(err error) bool {
	switch {
	case err == nil:
		return false
	case IsNotSent(err), errors.Is(err, fasthttp.ErrDialTimeout), errors.Is(err, fasthttp.ErrTLSHandshakeTimeout),
		errors.Is(err, fasthttp.ErrNoFreeConns):
		return true
	}
	// A TLS handshake that failed: fasthttp makes it after the dial
	// function returns, before the request's first byte.
	var alert tls.AlertError
	var verify *tls.CertificateVerificationError
	var record tls.RecordHeaderError
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	if errors.As(err, &alert) || errors.As(err, &verify) || errors.As(err, &record) ||
		errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// host is what the proxy has learnt of one server address: how long it
// keeps a connection unused (Keep-Alive: timeout=), if it said.
type host struct {
	limit atomic.Int64 // nanoseconds a connection may stay unused; 0: not said
}

// hosts maps a server's address (host:port, as fasthttp dials it) to its
// host: one table for the process, since what a server says of itself
// holds for every client of it. It grows by the addresses the proxy's
// clients reach: its upstream and its webhooks.
var hosts sync.Map

func hostOf(addr string) *host {
	if h, ok := hosts.Load(addr); ok {
		return h.(*host)
	}
	h, _ := hosts.LoadOrStore(addr, new(host))
	return h.(*host)
}

// Conn is a client connection to a server, watched for the server's idle
// close (Wrap).
type Conn struct {
	net.Conn
	host *host
	// readAt is when the connection last read (nanoseconds on start's
	// clock), set by Read and cleared by the first Write after it: a
	// Write that finds it set begins a new request on a used connection.
	readAt atomic.Int64
	// reading counts the Reads in progress: a Write meanwhile is no new
	// request (fasthttp sends none while it reads an answer), but the
	// stream's own (a TLS close_notify), and is not checked.
	reading atomic.Int32
	// now returns nanoseconds on a monotonic clock; tests replace it.
	now func() int64
}

// start is the origin of the connections' monotonic clock.
var start = time.Now()

func monotonic() int64 { return int64(time.Since(start)) }

// Wrap wraps c, a connection just dialled to addr (host:port), to be
// watched for its server's idle close.
func Wrap(addr string, c net.Conn) *Conn {
	return &Conn{Conn: c, host: hostOf(addr), now: monotonic}
}

// Read reads from the connection, noting when.
func (c *Conn) Read(p []byte) (int, error) {
	c.reading.Add(1)
	n, err := c.Conn.Read(p)
	c.readAt.Store(c.now())
	c.reading.Add(-1)
	return n, err
}

// Write writes p. The first write after a read begins a new request on a
// used connection: if the server has closed the connection meanwhile, or
// it has been unused past the server's keep-alive timeout, nothing is
// written and the error is a NotSentError; so is that of a write that
// fails (but for a timeout: a server that reads too slowly is no reason
// to send again).
func (c *Conn) Write(p []byte) (int, error) {
	if last := c.readAt.Swap(0); last != 0 && c.reading.Load() == 0 {
		if err := c.check(time.Duration(c.now() - last)); err != nil {
			return 0, err
		}
	}
	n, err := c.Conn.Write(p)
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return n, &NotSentError{Reason: "writing it failed", Err: err}
	}
	return n, err
}

// check says whether a connection unused for idle may carry a request.
func (c *Conn) check(idle time.Duration) error {
	if limit := time.Duration(c.host.limit.Load()); limit > 0 && idle >= limit {
		return &NotSentError{Reason: "its connection was unused for " + idle.Round(time.Millisecond).String() +
			", past the server's keep-alive timeout"}
	}
	if idle >= peekAfter && peerClosed(c.Conn) {
		return &NotSentError{Reason: "the server had closed its connection"}
	}
	return nil
}

// retireBy returns how long the proxy keeps a connection unused when the
// server says it keeps one for timeout: a second less, or half of it when
// that is shorter than two seconds.
func retireBy(timeout time.Duration) time.Duration {
	return max(timeout-time.Second, timeout/2)
}

// noteKeepAlive learns, from a response's Keep-Alive header, how long its
// server keeps a connection unused.
func noteKeepAlive(addr string, resp *fasthttp.Response) {
	var v []byte
	for k, val := range resp.Header.All() {
		if len(k) == len("keep-alive") && bytes.EqualFold(k, []byte("keep-alive")) {
			v = val
			break
		}
	}
	if v == nil {
		return
	}
	if secs, ok := keepAliveTimeout(v); ok {
		hostOf(addr).limit.Store(int64(retireBy(time.Duration(secs) * time.Second)))
	}
}

// keepAliveTimeout returns the timeout parameter of a Keep-Alive header's
// value (RFC 2068 §19.7.1.1: "timeout=5, max=100"), in seconds.
func keepAliveTimeout(v []byte) (int, bool) {
	for part := range bytes.SplitSeq(v, []byte(",")) {
		name, value, ok := bytes.Cut(bytes.TrimSpace(part), []byte("="))
		if !ok || !bytes.EqualFold(bytes.TrimSpace(name), []byte("timeout")) {
			continue
		}
		secs, err := strconv.Atoi(string(bytes.Trim(bytes.TrimSpace(value), `"`)))
		if err != nil || secs <= 0 || secs > 24*3600 {
			return 0, false
		}
		return secs, true
	}
	return 0, false
}

// Rewinder is a request body stream that can be read again from its start,
// for a request sent again: Rewind returns its size.
type Rewinder interface {
	io.Reader
	Rewind() int
}

// Install makes c retire its idle connections after idle (zero:
// DefaultIdle) and send again, on another connection, a request that did
// not reach its server (a NotSentError); a request whose body is a stream
// only if the stream is a Rewinder. c's connections must be Wrapped by its
// dial function. Install goes before anything else that sets c's
// ConfigureClient, so that what those add runs once for a request sent
// again.
func Install(c *fasthttp.Client, idle time.Duration) {
	if idle <= 0 {
		idle = DefaultIdle
	}
	c.MaxIdleConnDuration = idle
	before := c.ConfigureClient
	c.ConfigureClient = func(hc *fasthttp.HostClient) error {
		if before != nil {
			if err := before(hc); err != nil {
				return err
			}
		}
		hc.Transport = transport{next: hc.Transport}
		return nil
	}
}

// Dial returns a dial function that dials as d does (nil: fasthttp.Dial)
// and Wraps the connection.
func Dial(d fasthttp.DialFunc) fasthttp.DialFunc {
	if d == nil {
		d = fasthttp.Dial
	}
	return func(addr string) (net.Conn, error) {
		c, err := d(addr)
		if err != nil {
			return nil, DialFailed(err)
		}
		return Wrap(addr, c), nil
	}
}

// transport sends requests as next does (fasthttp's default transport when
// nil), again on another connection while one did not reach its server.
type transport struct {
	next fasthttp.RoundTripper
}

func (t transport) RoundTrip(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) (bool, error) {
	next := t.next
	if next == nil {
		next = fasthttp.DefaultTransport
	}
	// fasthttp drops a request's body stream once it has copied it, the
	// write failed or not: it is taken now, to be rewound for a resend.
	var stream io.Reader
	if req.IsBodyStream() {
		stream = req.BodyStream()
	}
	for resends := 0; ; resends++ {
		retry, err := next.RoundTrip(hc, req, resp)
		if err == nil {
			noteKeepAlive(hc.Addr, resp)
			return retry, nil
		}
		if resends == maxResends || !resendable(err) || !rewind(req, stream) {
			return retry, err
		}
	}
}

// rewind makes req's body, stream if it was a stream, readable again from
// its start, and reports whether it could: a stream must be a Rewinder.
func rewind(req *fasthttp.Request, stream io.Reader) bool {
	if stream == nil {
		return true // its bytes are still there
	}
	r, ok := stream.(Rewinder)
	if !ok {
		return false
	}
	req.SetBodyStream(r, r.Rewind())
	return true
}

// resendable reports whether a request that failed with err is sent again
// on another connection: its connection was found closed or stale, or its
// write failed. One that could not be dialled is not: a new connection
// would fail the same way, and the caller has the error at once.
func resendable(err error) bool {
	var ns *NotSentError
	return errors.As(err, &ns) && !ns.dial
}

package upstream

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/keepalive"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// An HTTP+SSE upstream (protocol 2024-11-05) is, for a session, one event
// stream of the server's messages and one URL to POST the client's to. Its
// session is a Conn (SSEConn): each frame is POSTed, in order, and its
// Stream brings only the proxy's error where the POST failed (the answers
// come on the event stream, which is Listen's); a cancel is POSTed like any
// other frame, or withdraws its request with it while that waits for a
// sign-in. The sidecar serves it as it serves a stdio server, through
// Children: a stdio.Session per client session (and one for every
// sessionless request, with ids and tokens renamed) over stdio.Lines; late
// answers and progress are the session's to suppress.

// DefaultEndpointWait bounds how long DialSSE waits for the upstream's
// endpoint event.
const DefaultEndpointWait = 10 * time.Second

// SSEUpstream dials an HTTP+SSE server: Open opens one event stream, a
// session, as a Conn; so does Dial (a Dialer).
type SSEUpstream struct {
	// URL is the server's SSE endpoint (GET). Required.
	URL *url.URL
	// Client makes the requests; it must stream response bodies.
	Client *fasthttp.Client
	// MaxBodySize bounds an event. If zero, framing.DefaultMaxFrameSize.
	MaxBodySize int
	// EndpointWait bounds the wait for the endpoint event. If zero,
	// DefaultEndpointWait.
	EndpointWait time.Duration
	// OnUpstreamError, if set, is called for each request the proxy
	// answers in the upstream's place (its POST failed).
	OnUpstreamError func()
}

// NewSSEUpstream returns an SSEUpstream for the event stream at rawURL, with
// a client of its own; maxBody bounds an event, maxHeader the response
// headers (zero: the defaults).
func NewSSEUpstream(rawURL string, maxBody, maxHeader int) (*SSEUpstream, error) {
	u, err := parseUpstream(rawURL)
	if err != nil {
		return nil, err
	}
	return &SSEUpstream{URL: u, MaxBodySize: maxBody, Client: NewClient(maxBody, maxHeader)}, nil
}

// NewStreamableUpstream returns a StreamableUpstream for the MCP endpoint at
// rawURL, with a client of its own; maxBody bounds an answer or an event,
// maxHeader the response headers (zero: the defaults).
func NewStreamableUpstream(rawURL string, maxBody, maxHeader int) (*StreamableUpstream, error) {
	u, err := parseUpstream(rawURL)
	if err != nil {
		return nil, err
	}
	return &StreamableUpstream{Endpoint: Endpoint{URL: u, Client: NewClient(maxBody, maxHeader)}, MaxBodySize: maxBody}, nil
}

func parseUpstream(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("upstream %q is not an http(s) URL", rawURL)
	}
	return u, nil
}

// DefaultMaxResponseHeaderBytes bounds an upstream's response headers
// (http.max_response_header_bytes): what real servers send behind gateways
// and identity proxies (several KiB of cookies and policies) fits.
const DefaultMaxResponseHeaderBytes = 64 << 10

// NewClient returns a client for an upstream: bodies streamed, header
// names and paths as they are, responses up to maxBody and their headers
// up to maxHeader (zero: the defaults). fasthttp's read buffer is the
// header limit, held per connection while a response streams. Its idle
// connections are retired after keepalive.DefaultIdle (set
// MaxIdleConnDuration to change that), and a request that did not reach
// the server on a connection it had closed is sent again on another
// (keepalive.Install).
func NewClient(maxBody, maxHeader int) *fasthttp.Client {
	c := &fasthttp.Client{
		ReadBufferSize:                cmp.Or(maxHeader, DefaultMaxResponseHeaderBytes),
		StreamResponseBody:            true,
		DialTimeout:                   dialUpstream,
		NoDefaultUserAgentHeader:      true,
		DisableHeaderNamesNormalizing: true,
		DisablePathNormalizing:        true,
		MaxConnsPerHost:               1 << 16,
		MaxResponseBodySize:           cmp.Or(maxBody, framing.DefaultMaxFrameSize),
		// Its errors quote no byte of what the upstream sent (an oversized
		// header's contents): sizes only, in the log and the client's error.
		ConfigureClient: func(hc *fasthttp.HostClient) error { hc.SecureErrorLogMessage = true; return nil },
	}
	keepalive.Install(c, 0)
	return c
}

// Dial implements Dialer: it opens a session (Open).
func (u *SSEUpstream) Dial(log *zap.Logger) (Conn, error) {
	c, err := u.Open(log)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Open opens the event stream, waits for its endpoint event, and returns
// the session.
func (u *SSEUpstream) Open(log *zap.Logger) (*SSEConn, error) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI(u.URL.String())
	req.Header.SetMethod(fasthttp.MethodGet)
	req.Header.Set("Accept", "text/event-stream")
	resp := fasthttp.AcquireResponse()
	if err := u.Client.Do(req, resp); err != nil {
		fasthttp.ReleaseResponse(resp)
		return nil, fmt.Errorf("opening the upstream's event stream: %w", err)
	}
	if status := resp.StatusCode(); status == fasthttp.StatusUnauthorized {
		challenge := string(Peek(resp.Header.All(), "WWW-Authenticate"))
		ReadHead(resp)
		return nil, errors.New(wantsAuthorization(challenge))
	} else if ct := string(resp.Header.ContentType()); status != fasthttp.StatusOK || !IsEventStream([]byte(ct)) {
		ReadHead(resp) // releases resp: its header is read before
		return nil, fmt.Errorf("the upstream answered its event stream's GET with %d %q, not an event stream", status, ct)
	}
	first := NewPosting()
	first.Headed() // no POST before the first
	c := &SSEConn{u: u, log: log, resp: resp, body: BodyOf(resp), prev: first, postings: map[*proxy.Call]*Posting{}}
	c.rd = framing.NewSSEReader(c.body, max(u.MaxBodySize, 0))
	if err := c.awaitEndpoint(); err != nil {
		c.body.CloseWithError(errSSEStopped)
		c.rd.Release()
		fasthttp.ReleaseResponse(resp)
		return nil, err
	}
	log.Info("upstream HTTP+SSE session opened", events.Mark(events.UpstreamSessionOpened), zap.String("endpoint", c.endpoint))
	return c, nil
}

// SpeaksSSE reports whether c is an HTTP+SSE server's connection (the
// 2024-11-05 transport), which Dial found or was told.
func SpeaksSSE(c Conn) bool {
	_, ok := c.(*SSEConn)
	return ok
}

// SSEConn is one HTTP+SSE session, a Conn: its event stream (Listen's)
// and the endpoint each frame is POSTed to.
type SSEConn struct {
	u        *SSEUpstream
	log      *zap.Logger
	resp     *fasthttp.Response
	body     fasthttp.ReadCloserWithError
	rd       *framing.SSEReader // Listen's
	endpoint string

	order sync.Mutex // held by Send and Cancel while they wait their turn
	prev  *Posting   // the last POST's: the next waits for its answer; under order

	mu        sync.Mutex
	postings  map[*proxy.Call]*Posting // each request's, until its POST is answered
	running   sync.WaitGroup           // the POSTs under way
	ended     bool                     // the event stream ended, or Close came: no POST starts
	listening bool                     // Listen was called

	closeOnce sync.Once
	stopped   atomic.Bool // Close was called: the stream's end is no news
}

// ErrSessionEnded ends a Conn's Listen stream when the server ended the
// session (an HTTP+SSE server's event stream is its session): nothing more
// can pass either way.
var ErrSessionEnded = errors.New("the upstream ended the session")

var errSSEStopped = errors.New("the session ended")

// Close implements Conn: it ends the event stream (the upstream ends its
// session with it) and waits for the POSTs under way.
func (c *SSEConn) Close() error {
	c.closeOnce.Do(func() {
		c.stopped.Store(true)
		c.mu.Lock()
		c.ended = true
		c.mu.Unlock()
		c.body.CloseWithError(errSSEStopped)
	})
	c.running.Wait()
	return nil
}

// awaitEndpoint reads up to the endpoint event, within EndpointWait, and
// keeps its URL, resolved against the stream's, if it has the same origin.
func (c *SSEConn) awaitEndpoint() error {
	wait := time.AfterFunc(cmp.Or(c.u.EndpointWait, DefaultEndpointWait), func() { c.body.CloseWithError(errSSEStopped) })
	defer wait.Stop()
	for {
		ev, err := c.rd.Next()
		if err != nil {
			return fmt.Errorf("the upstream's event stream ended before its endpoint event: %w", err)
		}
		if string(ev.Type) != "endpoint" {
			continue
		}
		ref, err := url.Parse(string(bytes.TrimSpace(ev.Data)))
		if err != nil {
			return fmt.Errorf("the upstream's endpoint event %q is not a URL: %w", ev.Data, err)
		}
		ep := c.u.URL.ResolveReference(ref)
		if ep.Scheme != c.u.URL.Scheme || ep.Host != c.u.URL.Host {
			return fmt.Errorf("the upstream's endpoint %s is not on the stream's origin %s://%s", ep, c.u.URL.Scheme, c.u.URL.Host)
		}
		c.endpoint = ep.String()
		return nil
	}
}

// Listen implements Conn: the event stream, read by its caller. It ends
// with ErrSessionEnded, once: there is one.
func (c *SSEConn) Listen(context.Context) (Stream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.listening {
		return nil, errors.New("the session's event stream is already read")
	}
	c.listening = true
	return &sseEvents{c: c}, nil
}

// sseEvents is the session's event stream as a Stream.
type sseEvents struct {
	c    *SSEConn
	done bool
}

// Next implements Stream: the server's next message. An event over the
// size limit is skipped, as the wrapper skips an over-long line (the
// session goes on), and if it answered a request, that request gets the
// proxy's error in its place.
func (e *sseEvents) Next() ([]byte, error) {
	if e.done {
		return nil, ErrSessionEnded
	}
	c := e.c
	for {
		ev, err := c.rd.Next()
		if tl, ok := errors.AsType[*framing.EventTooLargeError](err); ok {
			if reply := c.tooLarge(tl); reply != nil {
				return reply, nil
			}
			continue
		}
		if err != nil {
			e.done = true
			c.streamEnded(err)
			return nil, ErrSessionEnded
		}
		if (len(ev.Type) == 0 || string(ev.Type) == "message") && ev.HasData {
			return ev.Data, nil
		}
	}
}

// Close implements Stream: the session's event stream is its session.
func (e *sseEvents) Close() error { return e.c.Close() }

// streamEnded settles the end of the event stream: logged unless Close
// ended it, and no POST starts after it.
func (c *SSEConn) streamEnded(err error) {
	c.rd.Release()
	switch {
	case c.stopped.Load():
		err = nil // the session ended it
	case errors.Is(err, io.EOF):
		c.log.Info("the upstream ended its event stream")
		err = nil
	default:
		c.log.Warn("the upstream's event stream broke", zap.Error(err))
	}
	c.body.CloseWithError(err)
	c.mu.Lock()
	c.ended = true
	c.mu.Unlock()
	fasthttp.ReleaseResponse(c.resp)
}

// tooLarge handles an event over the size limit, which the reader skipped:
// logged, and if it answered a request (its head says so), the proxy's
// error for that request, so that nobody waits for it.
func (c *SSEConn) tooLarge(tl *framing.EventTooLargeError) []byte {
	id, isResponse, ok := framing.PeekID(tl.Head)
	limit := cmp.Or(c.u.MaxBodySize, framing.DefaultMaxFrameSize)
	c.log.Error("an upstream event over the size limit was skipped", zap.Int("limit", limit), zap.Stringer("id", id))
	if !ok || !isResponse {
		return nil
	}
	why := fmt.Sprintf("Internal error: the server's response was dropped: an event over the size limit of %d bytes (limits.max_frame_size)", limit)
	return proxy.ErrorReply(id, framing.CodeInternalError, why)
}

// Send implements Conn: it POSTs frame to the endpoint, in order: a POST
// starts once the one before it is answered, or waits for a sign-in (the
// POSTs after it then wait for the same sign-in, and go in no set order
// once it is done). Its Stream brings the proxy's error for a request the
// upstream did not take, so that its client is not left waiting.
func (c *SSEConn) Send(_ context.Context, frame []byte, calls []*proxy.Call, a Along) (Stream, error) {
	p := &ssePost{msg: bytes.Clone(frame)}
	if m := a.Msg; m != nil {
		p.isRequest, p.id = m.Kind == framing.KindRequest, m.ID
	} else {
		var f framing.Frame
		if f.Parse(p.msg) == nil && !f.Batch {
			p.isRequest, p.id = f.Msgs[0].Kind == framing.KindRequest, f.Msgs[0].ID
		}
	}
	if p.isRequest && len(calls) == 1 {
		p.call = calls[0]
	}
	c.order.Lock()
	defer c.order.Unlock()
	c.prev.waitAnswered()
	if !c.start(p) {
		return nil, errConnClosed
	}
	return p, nil
}

// Cancel implements Conn: the cancel is POSTed like any frame, unless its
// request waits for a sign-in: then the request is withdrawn, and neither
// is sent.
func (c *SSEConn) Cancel(call *proxy.Call, notice []byte) error {
	c.order.Lock()
	defer c.order.Unlock()
	c.prev.waitAnswered()
	c.mu.Lock()
	withdrawn := c.postings[call].Withdraw()
	c.mu.Unlock()
	if withdrawn {
		c.log.Debug("a request waiting for a sign-in was cancelled: withdrawn")
		return nil
	}
	if !c.start(&ssePost{msg: bytes.Clone(notice)}) {
		return errConnClosed
	}
	return nil
}

// start begins POSTing p, unless the event stream has ended; order is
// held.
func (c *SSEConn) start(p *ssePost) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended { // the session fails what is in flight as it ends
		c.log.Debug("a message for an upstream whose event stream ended is not sent", zap.Int("bytes", len(p.msg)))
		return false
	}
	p.posting = NewPosting()
	c.prev = p.posting
	if p.call != nil {
		c.postings[p.call] = p.posting
	}
	c.running.Add(1)
	p.got.Add(1)
	go c.post(p)
	return true
}

// ssePost is one POST to the endpoint, and the Stream of the proxy's
// error in the place of an answer the upstream did not take.
type ssePost struct {
	msg       []byte
	isRequest bool
	id        framing.ID
	call      *proxy.Call
	posting   *Posting
	got       sync.WaitGroup // done once the POST is over
	reply     []byte         // set before got is done
	read      bool           // Next's
}

// Next implements Stream.
func (p *ssePost) Next() ([]byte, error) {
	p.got.Wait()
	if p.read || p.reply == nil {
		return nil, io.EOF
	}
	p.read = true
	return p.reply, nil
}

// Close implements Stream: the answers come on the event stream; there is
// nothing to end.
func (p *ssePost) Close() error { return nil }

// post sends one message to the endpoint.
func (c *SSEConn) post(p *ssePost) {
	defer c.running.Done()
	defer p.got.Done()
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI(c.endpoint)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	p.posting.body.Reset(p.msg)
	req.SetBodyStream(p.posting, len(p.msg))
	resp := fasthttp.AcquireResponse()
	err := c.u.Client.Do(req, resp)
	c.answered(p)
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		resp = nil
	}
	if errors.Is(err, ErrWithdrawn) { // cancelled while it waited for a sign-in: the client has its cancel's answer
		return
	}
	reply, refused := postRefused(resp, err, c.log, c.u.OnUpstreamError)
	if !refused {
		ReadHead(resp) // the answers come on the event stream
		return
	}
	if p.isRequest {
		p.reply = reply(p.id)
	}
}

// answered notes that a POST has its answer, or failed: the next may go.
func (c *SSEConn) answered(p *ssePost) {
	p.posting.Headed()
	if p.call == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.postings[p.call] == p.posting {
		delete(c.postings, p.call)
	}
}

// EventLine returns an event's data as one line, without a newline:
// compact JSON, or, if it is not JSON, with its line breaks made spaces
// (the session answers it as the parse error it is); data itself when it
// is one line already.
func EventLine(data []byte) []byte {
	line, err := OneLine(data)
	if err != nil {
		line = bytes.Map(func(r rune) rune {
			if r == '\r' || r == '\n' {
				return ' '
			}
			return r
		}, data)
	}
	return line
}

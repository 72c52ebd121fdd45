package upstream

import (
	"bytes"
	"cmp"
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
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
)

// An HTTP+SSE upstream (protocol 2024-11-05) is, for a session, one event
// stream of the server's messages and one URL to POST the client's to: a
// byte stream each way, as a stdio child's pipes are. So the sidecar serves
// it as it serves a stdio server, through Children: a stdio.Session per
// client session (and one for every sessionless request, with ids and
// tokens renamed), between the client's HTTP streams and this backend. A
// client's cancel is a line the session writes, which is POSTed; late
// answers and progress are the session's to suppress.

// DefaultEndpointWait bounds how long DialSSE waits for the upstream's
// endpoint event.
const DefaultEndpointWait = 10 * time.Second

// SSEUpstream dials an HTTP+SSE server: Dial opens one event stream and
// returns it as a Backend.
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

// Dial opens the event stream, waits for its endpoint event, and returns
// the session's backend.
func (u *SSEUpstream) Dial(log *zap.Logger) (Backend, error) {
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
	b := &sseBackend{u: u, log: log, resp: resp, body: BodyOf(resp), in: stdio.NewFrames(), exited: make(chan struct{})}
	b.rd = framing.NewSSEReader(b.body, max(u.MaxBodySize, 0))
	if err := b.awaitEndpoint(); err != nil {
		b.Stop()
		b.rd.Release()
		fasthttp.ReleaseResponse(resp)
		return nil, err
	}
	log.Info("upstream HTTP+SSE session opened", events.Mark(events.UpstreamSessionOpened), zap.String("endpoint", b.endpoint))
	go b.pump()
	return b, nil
}

// sseBackend is one HTTP+SSE session: the event stream, read into in as
// lines, and the endpoint that Write POSTs each line to.
// SpeaksSSE reports whether b is an HTTP+SSE server's connection (the
// 2024-11-05 transport), which Dial found or was told.
func SpeaksSSE(b Backend) bool {
	_, ok := b.(*sseBackend)
	return ok
}

type sseBackend struct {
	u        *SSEUpstream
	log      *zap.Logger
	resp     *fasthttp.Response
	body     fasthttp.ReadCloserWithError
	rd       *framing.SSEReader
	endpoint string

	in *stdio.Frames // the server's messages, and the proxy's answers, toward the session

	lines framing.LineSplitter // only Write uses it

	mu       sync.Mutex
	prev     *Posting                // the last POST's: the next waits for it (Write)
	postings map[framing.ID]*Posting // each request's, until its POST is answered
	running  sync.WaitGroup          // the POSTs under way
	ended    bool                    // the event stream ended: no POST starts

	stopOnce sync.Once
	stopped  atomic.Bool // Stop was called: the stream's end is no news
	exited   chan struct{}
}

var errSSEStopped = errors.New("the session ended")

func (b *sseBackend) Conn() stdio.Conn        { return stdio.Conn{In: b.in, Out: b} }
func (b *sseBackend) Exited() <-chan struct{} { return b.exited }

// Stop ends the event stream (the upstream ends its session with it).
func (b *sseBackend) Stop() {
	b.stopOnce.Do(func() {
		b.stopped.Store(true)
		b.body.CloseWithError(errSSEStopped)
	})
}

// awaitEndpoint reads up to the endpoint event, within EndpointWait, and
// keeps its URL, resolved against the stream's, if it has the same origin.
func (b *sseBackend) awaitEndpoint() error {
	wait := time.AfterFunc(cmp.Or(b.u.EndpointWait, DefaultEndpointWait), b.Stop)
	defer wait.Stop()
	for {
		ev, err := b.rd.Next()
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
		ep := b.u.URL.ResolveReference(ref)
		if ep.Scheme != b.u.URL.Scheme || ep.Host != b.u.URL.Host {
			return fmt.Errorf("the upstream's endpoint %s is not on the stream's origin %s://%s", ep, b.u.URL.Scheme, b.u.URL.Host)
		}
		b.endpoint = ep.String()
		return nil
	}
}

// pump copies the server's messages from the event stream to in, one line
// each, until the stream ends.
func (b *sseBackend) pump() {
	defer close(b.exited)
	defer fasthttp.ReleaseResponse(b.resp)
	var err error
	for {
		var ev *framing.Event
		ev, err = b.rd.Next()
		if tl, ok := errors.AsType[*framing.EventTooLargeError](err); ok {
			// Skipped, as the wrapper skips an over-long line: the session
			// goes on, and the request it answered gets an error.
			if err = b.tooLarge(tl); err != nil {
				break
			}
			continue
		}
		if err != nil {
			break
		}
		if len(ev.Type) != 0 && string(ev.Type) != "message" || !ev.HasData {
			continue
		}
		if err = b.in.Put(eventLine(ev.Data)); err != nil {
			break
		}
	}
	b.rd.Release()
	switch {
	case b.stopped.Load() || errors.Is(err, io.ErrClosedPipe):
		err = nil // the session ended it
	case errors.Is(err, io.EOF):
		b.log.Info("the upstream ended its event stream")
		err = nil
	default:
		b.log.Warn("the upstream's event stream broke", zap.Error(err))
	}
	b.body.CloseWithError(err)
	b.mu.Lock()
	b.ended = true // so that no POST starts while running is waited for
	b.mu.Unlock()
	b.running.Wait() // their refusals go to in first
	b.in.CloseWrite()
}

// tooLarge handles an event over the size limit, which the reader skipped:
// logged, and if it answered a request (its head says so), that request is
// answered with the proxy's error, so that nobody waits for it.
func (b *sseBackend) tooLarge(tl *framing.EventTooLargeError) error {
	id, isResponse, ok := framing.PeekID(tl.Head)
	limit := cmp.Or(b.u.MaxBodySize, framing.DefaultMaxFrameSize)
	b.log.Error("an upstream event over the size limit was skipped", zap.Int("limit", limit), zap.Stringer("id", id))
	if !ok || !isResponse {
		return nil
	}
	why := fmt.Sprintf("Internal error: the server's response was dropped: an event over the size limit of %d bytes (limits.max_frame_size)", limit)
	return b.in.Put(proxy.ErrorReply(id, framing.CodeInternalError, why))
}

// Write POSTs each line it is given to the endpoint, in order: a POST
// starts once the one before it is answered, or waits for a sign-in (the
// POSTs after it then wait for the same sign-in, and go in no set order
// once it is done). A request the upstream does not take is answered with
// an error, so that its client is not left waiting; the cancel of a
// request that waits for a sign-in withdraws it, and neither is sent.
func (b *sseBackend) Write(p []byte) (int, error) {
	b.lines.Split(p, func(line []byte) bool {
		b.prev.waitAnswered()
		b.start(bytes.Clone(line))
		return true
	})
	return len(p), nil
}

// start begins POSTing a line.
func (b *sseBackend) start(line []byte) {
	var f framing.Frame
	parsed := f.Parse(line) == nil && !f.Batch
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended { // the session fails what is in flight as it ends
		b.log.Debug("a message for an upstream whose event stream ended is not sent", zap.Int("bytes", len(line)))
		return
	}
	if parsed && f.Msgs[0].Method == framing.MethodCancelled && b.postings[f.Msgs[0].RequestID].Withdraw() {
		b.log.Debug("a request waiting for a sign-in was cancelled: withdrawn", zap.Stringer("id", f.Msgs[0].RequestID))
		return
	}
	posting := NewPosting()
	b.prev = posting
	var id *framing.ID
	if parsed && f.Msgs[0].Kind == framing.KindRequest {
		id = &f.Msgs[0].ID
		if b.postings == nil {
			b.postings = map[framing.ID]*Posting{}
		}
		b.postings[*id] = posting
	}
	b.running.Add(1)
	go b.post(line, id, posting)
}

// Close ends the session: the client's side has ended.
func (b *sseBackend) Close() error {
	b.Stop()
	return nil
}

// post sends one message to the endpoint: the request id's, if id is
// not nil.
func (b *sseBackend) post(msg []byte, id *framing.ID, posting *Posting) {
	defer b.running.Done()
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.SetRequestURI(b.endpoint)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	posting.body.Reset(msg)
	req.SetBodyStream(posting, len(msg))
	resp := fasthttp.AcquireResponse()
	err := b.u.Client.Do(req, resp)
	b.answered(id, posting)
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		resp = nil
	}
	if errors.Is(err, ErrWithdrawn) { // cancelled while it waited for a sign-in: the client has its cancel's answer
		return
	}
	reply, refused := postRefused(resp, err, b.log, b.u.OnUpstreamError)
	if !refused {
		ReadHead(resp) // the answers come on the event stream
		return
	}
	if id != nil {
		b.in.Put(reply(*id))
	}
}

// answered notes that a POST has its answer, or failed: the next may go.
func (b *sseBackend) answered(id *framing.ID, posting *Posting) {
	posting.Headed()
	if id == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.postings[*id] == posting {
		delete(b.postings, *id)
	}
}

// eventLine returns an event's data as one line, without a newline:
// compact JSON, or, if it is not JSON, with its line breaks made spaces
// (the session answers it as the parse error it is).
func eventLine(data []byte) []byte {
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

package upstream

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/mcpheader"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
)

// A Streamable HTTP upstream reached as a client reaches it, for a session
// shaped like stdio (an old HTTP+SSE client's): each line the session sends
// is POSTed, and what answers it (JSON, or an event stream) comes back as
// lines, as does the session's GET stream once initialize has named the
// session. A cancel is a line like any other: POSTed.

// errStreamCancelled ends a request's stream the session no longer wants
// (its request was cancelled).
var errStreamCancelled = errors.New("the request this stream answers was cancelled")

// deleteWait bounds the wait for the answer to the DELETE that ends an
// upstream session.
const deleteWait = 5 * time.Second

// StreamableUpstream dials sessions of a Streamable HTTP server.
type StreamableUpstream struct {
	// Endpoint is the server's MCP endpoint (its URL and the client that
	// reaches it). Required.
	Endpoint
	// MaxBodySize bounds a JSON answer or an event. If zero,
	// framing.DefaultMaxFrameSize.
	MaxBodySize int
	// KeepRevision, when set, sends the requests of a session the upstream
	// opened without a session id (a stateless server) in the client's
	// revision, even when the server speaks 2026-07-28 (see modernize.go);
	// a cancel then may not reach it.
	KeepRevision bool
	// Clock times the wait for the session's GET stream (StreamWait); if
	// nil, the real clock.
	Clock clock.Clock
	// OnUpstreamError, if set, is called for each request the proxy
	// answers in the upstream's place: not reached, or its answer spoiled
	// or lost.
	OnUpstreamError func()
}

// StreamWait bounds how long the line that follows the answer to
// initialize (the client's notifications/initialized) waits for the
// session's GET stream to have its headers: a server that sends something
// unrelated to a request (a roots/list, a list_changed) as soon as the
// client is initialized finds the stream open, and a server that counts a
// GET after a request's stream ended as its resumption (SEP-1699's
// retry) sees it as such only when it is one. A server that holds the
// GET's headers until it has something to send costs the session this
// much, once.
const StreamWait = TakenInWait

// Dial returns a session's backend; nothing is sent until its first line.
func (u *StreamableUpstream) Dial(log *zap.Logger) (Backend, error) {
	first := NewPosting()
	first.Headed() // no POST before the first
	return &streamBackend{u: u, log: log, in: stdio.NewFrames(), exited: make(chan struct{}), stop: make(chan struct{}),
		prev: first, postings: make(map[framing.ID]*Posting)}, nil
}

type streamBackend struct {
	u   *StreamableUpstream
	log *zap.Logger
	in  *stdio.Frames // the server's messages, and the proxy's answers, toward the session

	lines framing.LineSplitter // only Write uses it
	prev  *Posting             // the previous POST's; Write's
	// opening is the session's GET stream's while it has no headers yet
	// (StreamWait): the next line waits for it. Set before the answer to
	// initialize reaches the client; Write clears it.
	opening atomic.Pointer[Posting]

	mu      sync.Mutex // guards the fields below
	session string
	version string
	// clientInfo is the client's, from its initialize; modern is set when
	// the upstream, stateless, speaks 2026-07-28 too: the session's
	// requests are then sent as 2026-07-28 ones (see modernize).
	clientInfo  json.RawMessage
	modern      bool
	initialized bool // the first initialize was answered: later ones name no session
	// tools is what the 2026-07-28 answers to tools/list said of the
	// tools' mirrored parameters (Mcp-Param-*).
	tools  mcpheader.Tools
	listed atomic.Bool // tools has learned from an answer: a list_changed makes it forget
	// postings are the requests whose answers have no headers yet, by
	// id: where a cancel of one waits (Posting.BeforeCancel).
	postings map[framing.ID]*Posting
	// calls are the requests whose POST has started and whose answer has
	// not ended, by id. Without a session (2026-07-28, or a stateless
	// server) a POSTed cancel cannot find its request, so the request's own
	// stream is cut, which is the cancel in 2026-07-28: at once if it is
	// being read, or as soon as its headers come.
	calls   map[framing.ID]*call
	bodies  map[fasthttp.ReadCloserWithError]struct{} // streams being read, closed by Stop
	running sync.WaitGroup
	// cancelling counts the cancels not yet sent: Stop's DELETE waits
	// for them.
	cancelling sync.WaitGroup

	stopOnce sync.Once
	stop     chan struct{}
	exited   chan struct{}
}

// call is a request in flight, for a cancel of it.
type call struct {
	body fasthttp.ReadCloserWithError // its answer's event stream, while read
	cut  bool                         // cancelled without a session: its stream is cut
	// byClose: it went as a 2026-07-28 request, whose cancel is the cut
	// of its stream, and that alone.
	byClose bool
}

func (b *streamBackend) Conn() stdio.Conn        { return stdio.Conn{In: b.in, Out: b} }
func (b *streamBackend) Exited() <-chan struct{} { return b.exited }
func (b *streamBackend) Close() error            { b.Stop(); return nil }

// Stop ends the upstream session (DELETE) and every stream of it.
func (b *streamBackend) Stop() {
	b.stopOnce.Do(func() {
		b.mu.Lock()
		close(b.stop) // under mu: no POST starts after it (see start)
		session := b.session
		for body := range b.bodies {
			body.CloseWithError(errSSEStopped)
		}
		b.mu.Unlock()
		go func() {
			b.cancelling.Wait() // the session's cancels go before its end
			if session != "" {
				// Bounded: a server may hold its answer until its calls end.
				if resp, err := b.request(Request{Method: fasthttp.MethodDelete, Session: session}, deleteWait); err == nil {
					ReadHead(resp)
				}
			}
			b.cutUnanswered()
			b.running.Wait()
			b.in.CloseWrite()
			close(b.exited)
		}()
	})
}

// cutUnanswered closes the connections of the POSTs whose answers have no
// headers yet, once the backend stops: nobody will read those answers (a
// stopped backend's streams are closed, as they come), and a server that
// sends nothing until it answers, and ignores a cancel, would otherwise
// keep the backend, and its client's process, waiting for ever.
func (b *streamBackend) cutUnanswered() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.postings {
		p.Cut()
	}
}

// Write POSTs each line, in order: a POST starts once the one before it
// has been written whole to its connection, however long that connection
// takes to open, and a cancel once its request may be cancelled
// (Posting.BeforeCancel). No POST waits for another's answer.
func (b *streamBackend) Write(p []byte) (int, error) {
	b.lines.Split(p, func(line []byte) bool {
		return b.prev.waitWritten(b.stop) && b.opened() && b.start(bytes.Clone(line))
	})
	return len(p), nil
}

// opened waits until the session's GET stream, if it is being opened, has
// its headers or StreamWait has passed, or the backend stops: then it
// reports false.
func (b *streamBackend) opened() bool {
	p := b.opening.Load()
	if p == nil {
		return true
	}
	if !p.waitFor(postingHeaded, b.stop) {
		return false
	}
	b.opening.CompareAndSwap(p, nil)
	return true
}

// outgoing is one line on its way upstream.
type outgoing struct {
	msg       []byte
	f         framing.Frame
	parsed    bool     // one message, JSON-RPC
	isRequest bool     // a request
	posting   *Posting // the request's, or what the next POST waits for
	call      *call    // the request's
	cancelOf  *Posting // for a cancel: its request's, if not yet headed
	cancel    bool
}

// start begins POSTing a line, unless the backend has stopped.
func (b *streamBackend) start(line []byte) bool {
	o := &outgoing{msg: line}
	o.parsed = o.f.Parse(line) == nil && !o.f.Batch
	o.isRequest = o.parsed && o.f.Msgs[0].Kind == framing.KindRequest
	o.cancel = o.parsed && o.f.Msgs[0].Method == framing.MethodCancelled
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.stop:
		return false
	default:
	}
	if o.cancel {
		o.cancelOf = b.postings[o.f.Msgs[0].RequestID] // the next POST does not wait for it
		if b.session == "" && b.cut(o.f.Msgs[0].RequestID) {
			return true // the cut was the cancel: a notification would be a second one
		}
	} else {
		o.posting = NewPosting()
		b.prev = o.posting
		if o.isRequest {
			id := o.f.Msgs[0].ID
			b.postings[id] = o.posting
			o.call = &call{byClose: b.modern || framing.Revision(cmp.Or(MetaVersion(&o.f.Msgs[0]), b.version)).CancelsByClose()}
			if b.calls == nil {
				b.calls = map[framing.ID]*call{}
			}
			b.calls[id] = o.call
		}
	}
	b.running.Add(1)
	if o.cancel {
		b.cancelling.Add(1)
	}
	go b.post(o)
	return true
}

// cut cancels the request id, if in flight, by cutting its answer's
// stream: now if it is being read, else once its headers come (track).
// Called with mu held, in the order of the client's lines: a cancel in the
// same write as its request finds it. It reports whether the cut is the
// whole cancel (a 2026-07-28 request's).
func (b *streamBackend) cut(id framing.ID) bool {
	c := b.calls[id]
	if c == nil {
		return false // answered, or never seen
	}
	c.cut = true
	if c.body != nil {
		c.body.CloseWithError(errStreamCancelled)
	} else if c.byClose {
		b.postings[id].Cut() // no headers yet: its connection is the stream
	}
	return c.byClose
}

// ended forgets the request o carried, its answer over.
func (b *streamBackend) ended(o *outgoing) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if id := o.f.Msgs[0].ID; b.calls[id] == o.call {
		delete(b.calls, id)
	}
}

// wasCut reports whether the request id was cancelled by cutting its
// stream (the read then fails with the connection's error, not ours).
func (b *streamBackend) wasCut(id framing.ID) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.calls[id]
	return c != nil && c.cut
}

// headed notes that a request's POST has its answer's headers, or failed.
func (b *streamBackend) headed(o *outgoing) {
	if o.posting == nil {
		return
	}
	o.posting.Headed()
	if o.isRequest {
		b.mu.Lock()
		if id := o.f.Msgs[0].ID; b.postings[id] == o.posting {
			delete(b.postings, id)
		}
		b.mu.Unlock()
	}
}

// post sends one message and hands back what answers it.
func (b *streamBackend) post(o *outgoing) {
	defer b.running.Done()
	f, msg, parsed, isRequest := &o.f, o.msg, o.parsed, o.isRequest
	initialize := isRequest && f.Msgs[0].Method == framing.MethodInitialize
	b.mu.Lock()
	session := b.session
	if initialize {
		b.clientInfo = clientInfoOf(&f.Msgs[0])
	}
	if isRequest && b.modern && Modernizable(f.Msgs[0].Method) {
		if modern, err := Modernize(&f.Msgs[0], b.clientInfo); err == nil && f.Parse(modern) == nil {
			msg = modern
		}
	}
	b.mu.Unlock()
	if isRequest {
		defer b.ended(o)
	}
	if o.cancel {
		defer b.cancelling.Done()
		if o.cancelOf.Withdraw() { // its request waited for a sign-in: it is never sent, nor is this
			b.log.Debug("a request waiting for a sign-in was cancelled: withdrawn", zap.Stringer("id", f.Msgs[0].RequestID))
			return
		}
		o.cancelOf.BeforeCancel(nil, b.stop) // at the session's end, at once: before its DELETE
	}
	var m *framing.Message
	if parsed {
		m = &f.Msgs[0]
	}
	b.toolsFirst(m, session)
	resp, err := b.request(Request{Body: msg, Posting: o.posting, Session: session, Msg: m, Tools: &b.tools}, 0)
	b.headed(o)
	if reply := b.retryMismatch(m, msg, session, &resp, &err); reply != nil {
		b.in.Put(reply(f.Msgs[0].ID))
		return
	}
	if errors.Is(err, ErrWithdrawn) { // cancelled while it waited for a sign-in: the client has its cancel's answer
		return
	}
	if err == nil && resp.StatusCode() == fasthttp.StatusAccepted {
		ReadHead(resp)
		return
	}
	if reply, refused := postRefused(resp, err, b.log, b.u.OnUpstreamError); refused {
		if isRequest {
			b.in.Put(reply(f.Msgs[0].ID))
		}
		return
	}
	if initialize {
		b.noteInitialized(resp)
	}
	var id *framing.ID
	of := answersOther
	if isRequest {
		id = &f.Msgs[0].ID
		of = b.answering(m)
	}
	b.relay(resp, of, id)
}

// answering is what a request's answer tells the backend.
type answering uint8

const (
	answersOther      answering = iota
	answersInitialize           // the protocol version, and the session's GET stream
	answersToolsList            // in 2026-07-28, the tools' mirrored parameters
)

// answering returns what the answer to a request m tells the backend.
func (b *streamBackend) answering(m *framing.Message) answering {
	switch m.Method {
	case framing.MethodInitialize:
		return answersInitialize
	case "tools/list":
		b.mu.Lock()
		version := cmp.Or(MetaVersion(m), b.version)
		b.mu.Unlock()
		if framing.Revision(version).CancelsByClose() {
			return answersToolsList
		}
	}
	return answersOther
}

// noteInitialized takes the session the upstream's answer to the first
// initialize gives; without one (a stateless upstream), it asks, before the
// client has its answer and so before its next request, whether the
// upstream speaks 2026-07-28.
func (b *streamBackend) noteInitialized(resp *fasthttp.Response) {
	b.mu.Lock()
	first := !b.initialized
	if first {
		b.initialized = true
		b.session = strings.Clone(string(Peek(resp.Header.All(), SessionHeader)))
	}
	stateless := first && b.session == "" && !b.u.KeepRevision
	b.mu.Unlock()
	if stateless {
		b.probeModern()
	}
}

// postRefused reports whether a POST to the upstream failed (err, resp
// then nil or released) or was refused (HTTP 300 or more); then it has
// released resp, and reply makes the proxy's answer for the request the
// POST carried: for a 401, what the server asked for and how to give it;
// for a failure, the loss (PostLoss), logged and counted (count) as reply
// makes it. Otherwise resp is the caller's.
func postRefused(resp *fasthttp.Response, err error, log *zap.Logger, count func()) (reply func(framing.ID) []byte, refused bool) {
	var why string
	switch ae, signIn := errors.AsType[*AuthError](err); {
	case signIn:
		why = ae.Error() + "; the bridge's log says more (mcp-cancel-proxy auth logout URL forgets a sign-in that no longer works)"
	case err != nil:
		loss, why := PostLoss(err)
		return func(id framing.ID) []byte {
			Lost(log, count, id, loss, why)
			return proxy.LossReply(id, loss, why)
		}, true
	case resp.StatusCode() == fasthttp.StatusUnauthorized:
		challenge := string(Peek(resp.Header.All(), "WWW-Authenticate"))
		ReadHead(resp)
		log.Warn("the upstream wants authorization", zap.String("www_authenticate", challenge[:min(len(challenge), 200)]))
		return func(id framing.ID) []byte { return unauthorized(id, challenge) }, true
	case resp.StatusCode() >= 300:
		status := resp.StatusCode()
		return refusal(status, ReadHead(resp), log), true
	default:
		return nil, false
	}
	log.Warn("posting to the upstream failed", zap.String("why", why))
	return func(id framing.ID) []byte { return proxy.ErrorReply(id, framing.CodeInternalError, why) }, true
}

// refusal returns the answer to a request the upstream refused with an
// error status and the body head: the server's own error, as it wrote it,
// where it is a JSON-RPC one, else the proxy's naming the status.
func refusal(status int, head []byte, log *zap.Logger) func(framing.ID) []byte {
	if reply := serverError(head); reply != nil {
		log.Debug("the upstream answered the message with an error status", zap.Int("status", status))
		return reply
	}
	why := fmt.Sprintf("the upstream refused the message: HTTP %d %s", status, bytes.TrimSpace(head[:min(len(head), 200)]))
	log.Warn("posting to the upstream failed", zap.String("why", why))
	return func(id framing.ID) []byte { return proxy.ErrorReply(id, framing.CodeInternalError, why) }
}

// serverError returns, when body is a JSON-RPC error response (a stateless
// 2026-07-28 server answers an unknown method or bad params with one, under
// an HTTP error status), the answer it makes for a request id: the
// server's error object as it wrote it (code, message, data), under the
// request's id (the server's may be null). Otherwise nil: the status is
// the proxy's to explain.
func serverError(body []byte) func(framing.ID) []byte {
	var m struct {
		JSONRPC string          `json:"jsonrpc"`
		Error   json.RawMessage `json:"error"`
	}
	var e struct {
		Code    *int    `json:"code"`
		Message *string `json:"message"`
	}
	if json.Unmarshal(body, &m) != nil || m.JSONRPC != "2.0" || json.Unmarshal(m.Error, &e) != nil || e.Code == nil || e.Message == nil {
		return nil
	}
	var compact bytes.Buffer
	if json.Compact(&compact, m.Error) != nil {
		return nil
	}
	return func(id framing.ID) []byte {
		out := append([]byte(`{"jsonrpc":"2.0","id":`), id.AppendJSON(nil)...)
		out = append(append(out, `,"error":`...), compact.Bytes()...)
		return append(out, '}')
	}
}

// relay hands a response's messages to the session, a JSON body or each
// message event of an event stream, and releases the response. id, if not
// nil, is the request the stream answers.
func (b *streamBackend) relay(resp *fasthttp.Response, of answering, id *framing.ID) {
	defer fasthttp.ReleaseResponse(resp)
	body := BodyOf(resp)
	limit := cmp.Or(b.u.MaxBodySize, framing.DefaultMaxFrameSize)
	if !IsEventStream(resp.Header.ContentType()) {
		data, err := ReadAll(body, resp.Header.ContentLength(), limit)
		body.CloseWithError(nil)
		var why string
		if id != nil {
			why = Spoiled(data, err, limit, *id)
		} else if err != nil || len(data) > limit || len(bytes.TrimSpace(data)) == 0 {
			return // no request waits for it
		}
		if why != "" {
			b.lose(*id, proxy.Loss{Reason: proxy.ReasonSpoiled, MayHaveRun: true}, why)
			return
		}
		b.answer(data, of)
		return
	}
	b.relayStream(body, resp, limit, of, id)
}

// relayStream relays an event stream (body, of first) until the answer to
// id, if not nil, has come; a stream that ends before it is resumed while
// its events carry ids, each resumed stream's response released once read.
func (b *streamBackend) relayStream(body fasthttp.ReadCloserWithError, first *fasthttp.Response, limit int, of answering, id *framing.ID) {
	resp := first
	lastID := ""
	var retry time.Duration // the stream's retry field: how long to wait before resuming it
	for resumes := 0; ; resumes++ {
		answered, last, events, err := b.relayEvents(body, limit, of, id, &retry)
		if resumes > 0 {
			fasthttp.ReleaseResponse(resp) // a resumed stream's, read to its end
		}
		if id == nil || answered {
			return
		}
		lastID = cmp.Or(last, lastID)
		b.mu.Lock()
		resumable := lastID != "" && b.session != "" && !b.modern
		b.mu.Unlock()
		if !errors.Is(err, io.EOF) || !resumable || resumes > 0 && events == 0 || resumes == maxResumes {
			b.unanswered(*id, err)
			return
		}
		// The stream ended before the answer, and its events had ids: a
		// 2025 server may end a call's stream so (to have the client poll),
		// and resuming it is how the answer comes, once its retry field's
		// wait is over (SEP-1699).
		if !b.waitRetry(retry) {
			b.unanswered(*id, io.EOF)
			return
		}
		if resp = b.resume(lastID); resp == nil {
			b.unanswered(*id, io.EOF)
			return
		}
		body = BodyOf(resp)
	}
}

// stopped reports whether Stop has been called.
func (b *streamBackend) stopped() bool {
	select {
	case <-b.stop:
		return true
	default:
		return false
	}
}

// maxResumes bounds how many times one request's stream is resumed; each
// resumed stream must bring an event, or it is the last.
const maxResumes = 100

// maxRetryWait bounds the wait a stream's retry field asks for before it
// is resumed.
const maxRetryWait = time.Minute

// waitRetry waits d (at most maxRetryWait) before a stream is resumed, as
// its retry field asks; it reports false if the backend stopped meanwhile.
func (b *streamBackend) waitRetry(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(min(d, maxRetryWait))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-b.stop:
		return false
	}
}

// relayEvents hands the session each message event of an event stream,
// until it ends (err, io.EOF at its clean end); id, if not nil, is the
// request it answers. It reports whether the answer came, the last event
// id, and how many events there were; retry is set to the last retry field.
func (b *streamBackend) relayEvents(body fasthttp.ReadCloserWithError, limit int, of answering, id *framing.ID, retry *time.Duration) (answered bool, last string, events int, err error) {
	if err := b.track(body, id); err != nil {
		return false, "", 0, err
	}
	defer b.untrack(body, id)
	rd := framing.NewSSEReader(body, limit)
	defer rd.Release()
	for {
		ev, err := rd.Next()
		if err != nil {
			return answered, last, events, err
		}
		events++
		if ev.HasID && len(ev.ID) > 0 {
			last = string(ev.ID)
		}
		if ev.HasRetry {
			*retry = time.Duration(ev.Retry) * time.Millisecond
		}
		if (len(ev.Type) == 0 || string(ev.Type) == "message") && ev.HasData {
			answered = answered || id != nil && answers(ev.Data, *id) // scanned until the answer came
			b.answer(ev.Data, of)
		}
	}
}

// resume asks the upstream to resume the session's stream after the event
// last (a GET with Last-Event-ID), and returns its response, or nil when
// the upstream does not resume it.
func (b *streamBackend) resume(last string) *fasthttp.Response {
	b.mu.Lock()
	session := b.session
	b.mu.Unlock()
	resp, err := b.request(Request{Method: fasthttp.MethodGet, Session: session, LastEventID: last}, 0)
	if err != nil {
		b.log.Warn("resuming a request's stream failed", zap.String("error", Brief(err)))
		return nil
	}
	if resp.StatusCode() != fasthttp.StatusOK || !IsEventStream(resp.Header.ContentType()) {
		b.log.Warn("the upstream did not resume a request's stream", zap.Int("status", resp.StatusCode()))
		ReadHead(resp) // and releases it
		return nil
	}
	return resp
}

// KindUnauthorized is data.kind of the proxy's error for a request the
// upstream refused for want of authorization (HTTP 401): apart from a
// deadline's, so that a client can tell the user what to do.
const KindUnauthorized = "unauthorized"

// unauthorized is the proxy's answer to a request the upstream refused
// with 401: what the server asked for, and how to give it.
func unauthorized(id framing.ID, challenge string) []byte {
	return proxy.ErrorReplyKind(id, framing.CodeInternalError, wantsAuthorization(challenge), KindUnauthorized)
}

// wantsAuthorization says that the upstream answered 401 with challenge
// (its WWW-Authenticate), and how to give the proxy what it wants.
func wantsAuthorization(challenge string) string {
	msg := "the MCP server wants authorization (HTTP 401"
	if challenge != "" {
		msg += ", WWW-Authenticate: " + challenge[:min(len(challenge), 200)]
	}
	return msg + "): give it to the proxy with --header 'Authorization: Bearer ${TOKEN}' (the token from the environment) or --header-file FILE"
}

// unanswered gives the session the proxy's -32000 (upstream_lost) for the
// request whose stream ended without its answer: broken (the connection
// cut, an event cut short), or ended cleanly where nothing else can bring
// the answer (no session to resume in; 2026-07-28, where a broken stream
// loses the request; a stream whose events had no id, which nothing can
// resume; one the upstream would not resume). The sidecar answers a broken
// upstream stream the same way.
func (b *streamBackend) unanswered(id framing.ID, err error) {
	switch {
	case errors.Is(err, errStreamCancelled), errors.Is(err, errSSEStopped):
		return // the proxy ended it itself
	case errors.Is(err, io.EOF):
		b.lose(id, proxy.Loss{Reason: proxy.ReasonLost, MayHaveRun: true}, "the upstream ended the request's stream without answering it")
	default:
		b.lose(id, proxy.Loss{Reason: proxy.ReasonLost, MayHaveRun: true}, "the upstream's stream broke: "+Brief(err))
	}
}

// lose gives the session the proxy's -32000 for the request id, whose
// answer the upstream spoiled or lost (why), logged once and counted. A
// request the proxy cut itself, for a cancel or at the backend's stop
// (whatever error its read then returns, such as a closed connection's),
// owes nothing: the session ends its requests itself.
func (b *streamBackend) lose(id framing.ID, l proxy.Loss, why string) {
	if b.wasCut(id) || b.stopped() {
		return
	}
	Lost(b.log, b.u.OnUpstreamError, id, l, why)
	b.in.Put(proxy.LossReply(id, l, why))
}

// answers reports whether data is the answer to the request id: a scan of
// its top level for the id, not a second parse (the session parses it).
func answers(data []byte, id framing.ID) bool {
	if d := bytes.TrimSpace(data); len(d) > 0 && d[0] == '[' { // a batch (2025-03-26): rare, parsed
		var f framing.Frame
		return f.Parse(d) == nil && slices.ContainsFunc(f.Msgs, func(m framing.Message) bool {
			return m.Kind == framing.KindResponse && m.ID == id
		})
	}
	got, isResponse, ok := framing.PeekID(data)
	return ok && isResponse && got == id
}

// answer hands one message to the session; an initialize result names the
// protocol version, and opens the session's GET stream; a 2026-07-28
// tools/list result names the tools' mirrored parameters, and loses the
// tools whose annotations are invalid, which a client must leave out.
func (b *streamBackend) answer(data []byte, of answering) {
	if b.listed.Load() && bytes.Contains(data, listChanged) {
		b.tools.Forget() // read again before the next call
	}
	switch of {
	case answersToolsList:
		data = b.learnTools(data)
	case answersInitialize:
		var r struct {
			Result struct {
				ProtocolVersion string `json:"protocolVersion"`
			} `json:"result"`
		}
		if json.Unmarshal(data, &r) == nil && r.Result.ProtocolVersion != "" {
			b.mu.Lock()
			b.version = r.Result.ProtocolVersion
			b.mu.Unlock()
			opening := NewPosting()
			b.opening.Store(opening)
			b.running.Add(1)
			go b.listen(opening)
		}
	}
	b.in.Put(eventLine(data))
}

// learnTools learns a tools/list answer's mirrored parameters, and returns
// it without the tools whose annotations are invalid (each warned of
// once).
func (b *streamBackend) learnTools(data []byte) []byte {
	kept, rejected := b.tools.Learn(data)
	b.listed.Store(true)
	WarnRejected(b.log, b.tools.Unwarned(rejected))
	if kept == nil {
		return data
	}
	return kept
}

// listen reads the session's GET stream, if the upstream offers one;
// opening is told once its headers have come, the GET has failed, or
// StreamWait has passed.
func (b *streamBackend) listen(opening *Posting) {
	defer b.running.Done()
	b.mu.Lock()
	session := b.session
	b.mu.Unlock()
	t := clock.Or(b.u.Clock).AfterFunc(StreamWait, opening.Headed)
	resp, err := b.request(Request{Method: fasthttp.MethodGet, Session: session}, 0)
	t.Stop()
	opening.Headed()
	switch {
	case err != nil:
	case resp.StatusCode() != fasthttp.StatusOK || !IsEventStream(resp.Header.ContentType()):
		ReadHead(resp) // the upstream has no stream for other traffic
	default:
		b.relay(resp, answersOther, nil)
	}
}

// track notes the event stream body is being read (the answer to id, if
// not nil), for Stop and for a cancel to cut; it fails, body closed, when
// the session has stopped or the request was cancelled before its headers
// came.
func (b *streamBackend) track(body fasthttp.ReadCloserWithError, id *framing.ID) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.stop:
		body.CloseWithError(errSSEStopped)
		return errSSEStopped
	default:
	}
	if id != nil {
		if c := b.calls[*id]; c != nil {
			if c.cut {
				body.CloseWithError(errStreamCancelled)
				return errStreamCancelled
			}
			c.body = body
		}
	}
	if b.bodies == nil {
		b.bodies = map[fasthttp.ReadCloserWithError]struct{}{}
	}
	b.bodies[body] = struct{}{}
	return nil
}

func (b *streamBackend) untrack(body fasthttp.ReadCloserWithError, id *framing.ID) {
	b.mu.Lock()
	delete(b.bodies, body)
	if id != nil {
		if c := b.calls[*id]; c != nil && c.body == body {
			c.body = nil
		}
	}
	b.mu.Unlock()
	body.CloseWithError(nil)
}

// request sends one request of the session's (see Endpoint.Do), in the
// session's protocol revision.
func (b *streamBackend) request(r Request, timeout time.Duration) (*fasthttp.Response, error) {
	b.mu.Lock()
	r.Version = b.version
	b.mu.Unlock()
	return b.u.Do(r, timeout)
}

// MirrorHeaders sets the headers a 2026-07-28 server requires to match the
// body: Mcp-Method, Mcp-Name (the tool, prompt or resource named, or the
// task of a tasks/* request; in the Base64 sentinel form where it is not
// plain header text), and the protocol version the message's _meta names,
// which replaces *version.
func MirrorHeaders(req *fasthttp.Request, m *framing.Message, version *string) {
	if m.Method == "" {
		return
	}
	req.Header.Set("Mcp-Method", m.Method)
	if name, ok := MirroredName(m); ok {
		req.Header.Set("Mcp-Name", mcpheader.Encode(name))
	}
	if v := MetaVersion(m); v != "" {
		*version = v
	}
}

// MirroredName returns the value Mcp-Name mirrors for a request, before
// encoding: the tool or prompt named, the resource read, or the task of a
// tasks/* request (the tasks extension routes by it); ok is false for a
// method without one.
func MirroredName(m *framing.Message) (name string, ok bool) {
	var p struct {
		URI    string `json:"uri"`
		TaskID string `json:"taskId"`
	}
	params := func() bool {
		return m.ParamsSpan.Found() && json.Unmarshal(m.Raw[m.ParamsSpan.Start:m.ParamsSpan.End], &p) == nil
	}
	switch m.Method {
	case "tools/call", "prompts/get":
		return m.Name(), true
	case "resources/read":
		return p.URI, params()
	case "tasks/get", "tasks/update", "tasks/cancel", "tasks/result":
		return p.TaskID, params() && p.TaskID != ""
	}
	return "", false
}

// MetaVersion returns the protocol version a message's params._meta names
// (2026-07-28's io.modelcontextprotocol/protocolVersion), or "".
func MetaVersion(m *framing.Message) string {
	meta := m.MetaSpan
	if !meta.Found() || !bytes.Contains(m.Raw[meta.Start:meta.End], []byte("protocolVersion")) {
		return ""
	}
	var v struct {
		Version string `json:"io.modelcontextprotocol/protocolVersion"`
	}
	if json.Unmarshal(m.Raw[meta.Start:meta.End], &v) != nil {
		return ""
	}
	return v.Version
}

package upstream

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// answer is the Stream of what answers one POST of a StreamConn: nothing
// (202), the proxy's reply in the upstream's place, a JSON body, or an
// event stream, resumed while its events carry ids. The POST's goroutine
// sets resp (or replies) and is done with got; Next reads the rest in its
// caller's goroutine, so a message passes no other goroutine on its way.
type answer struct {
	c   *StreamConn
	o   outgoing       // what was POSTed
	got sync.WaitGroup // done once the POST's goroutine is done with the answer

	// Set by the POST's goroutine before got is done.
	resp    *fasthttp.Response // the answer to read, if any
	of      answering
	replies [][]byte // the proxy's, in the answer's place

	closed atomic.Bool

	// Next's alone.
	last []byte // the message Next returned last
	// parsed is a JSON answer, parsed to check it (Spoiled), and parsedAs
	// that answer as queued; parsed goes back to frames once Next moves on.
	parsed   *framing.Frame
	parsedAs []byte
	begun    bool
	done     bool
	queue    [][]byte
	body     fasthttp.ReadCloserWithError
	rd       *framing.SSEReader
	cur      *fasthttp.Response // the response rd reads: resp, or a resumed one
	resumes  int
	events   int // of the stream being read
	lastID   string
	retry    time.Duration // the stream's retry field: how long to wait before resuming it
	answered bool
}

// maxResumes bounds how many times one request's stream is resumed; each
// resumed stream must bring an event, or it is the last.
const maxResumes = 100

// maxRetryWait bounds the wait a stream's retry field asks for before it
// is resumed.
const maxRetryWait = time.Minute

// reply makes the proxy's answer for the request the POST carried.
func (a *answer) reply(reply func(framing.ID) []byte) {
	a.replies = append(a.replies, reply(a.o.f.Msgs[0].ID))
}

// frames holds the frames JSON answers are parsed into, for reuse.
var frames = sync.Pool{New: func() any { return new(framing.Frame) }}

// Next implements Stream.
func (a *answer) Next() ([]byte, error) {
	if a.parsed != nil && a.Frame() != nil { // moving on from it
		frames.Put(a.parsed)
		a.parsed, a.parsedAs = nil, nil
	}
	for len(a.queue) == 0 {
		if a.done {
			return nil, io.EOF
		}
		a.step()
	}
	m := a.queue[0]
	a.queue = a.queue[1:]
	a.last = m
	return m, nil
}

// Frame implements Parsed: a JSON answer was parsed to be checked, and
// its reader need not parse it again.
func (a *answer) Frame() *framing.Frame {
	if len(a.parsedAs) == 0 || len(a.last) != len(a.parsedAs) || &a.last[0] != &a.parsedAs[0] {
		return nil
	}
	return a.parsed
}

// Close implements Stream: the answer is read no further; one that comes
// after it is let go at once, so a Stream closed unread holds nothing.
func (a *answer) Close() error {
	if a.closed.Swap(true) {
		return nil
	}
	a.o.posting.Cut()
	a.c.mu.Lock()
	if f := a.o.flight; f != nil && f.body != nil {
		f.body.CloseWithError(errStreamCancelled)
	}
	a.c.mu.Unlock()
	return nil
}

// step reads on: the POST's outcome first, then an event, or the end of a
// stream, which is resumed or settled.
func (a *answer) step() {
	if !a.begun {
		a.begun = true
		a.begin()
		return
	}
	ev, err := a.rd.Next()
	if err != nil {
		a.streamEnded(err)
		return
	}
	a.events++
	if ev.HasID && len(ev.ID) > 0 {
		a.lastID = string(ev.ID)
	}
	if ev.HasRetry {
		a.retry = time.Duration(ev.Retry) * time.Millisecond
	}
	if (len(ev.Type) == 0 || string(ev.Type) == "message") && ev.HasData {
		a.answered = a.answered || a.o.isRequest && answers(ev.Data, a.o.f.Msgs[0].ID) // scanned until the answer came
		a.queue = append(a.queue, a.c.learn(ev.Data, a.of))
	}
}

// begin takes the POST's outcome: replies, a JSON body, or an event
// stream to read.
func (a *answer) begin() {
	a.got.Wait()
	a.queue = a.replies
	if a.resp == nil {
		a.finish()
		return
	}
	body := BodyOf(a.resp)
	if !IsEventStream(a.resp.Header.ContentType()) {
		a.json(body)
		return
	}
	a.read(a.resp, body)
}

// json reads a JSON answer whole: a request the body does not answer gets
// the proxy's -32000 (upstream_spoiled).
func (a *answer) json(body fasthttp.ReadCloserWithError) {
	limit := a.c.limit()
	data, err := ReadAll(body, a.resp.Header.ContentLength(), limit)
	body.CloseWithError(nil)
	fasthttp.ReleaseResponse(a.resp)
	a.resp = nil
	a.finish()
	if !a.o.isRequest {
		if err == nil && len(data) <= limit && len(bytes.TrimSpace(data)) > 0 {
			a.queue = append(a.queue, data)
		}
		return
	}
	f := frames.Get().(*framing.Frame)
	if why := Spoiled(data, err, limit, a.o.f.Msgs[0].ID, f); why != "" {
		frames.Put(f)
		a.lose(proxy.Loss{Reason: proxy.ReasonSpoiled, MayHaveRun: true}, why)
		return
	}
	out := a.c.learn(data, a.of)
	if len(out) == len(data) && &out[0] == &data[0] { // not rewritten (learn may: tools/list)
		a.parsed, a.parsedAs = f, out
	} else {
		frames.Put(f)
	}
	a.queue = append(a.queue, out)
}

// read starts reading the event stream of resp, tracked for a cancel.
func (a *answer) read(resp *fasthttp.Response, body fasthttp.ReadCloserWithError) {
	a.cur, a.body, a.events = resp, body, 0
	if err := a.c.track(body, a.o.flight); err != nil {
		a.streamEnded(err)
		return
	}
	if a.closed.Load() {
		body.CloseWithError(errStreamCancelled)
	}
	a.rd = framing.NewSSEReader(body, a.c.limit())
}

// streamEnded settles a stream that ended (err, io.EOF at its clean end):
// done if it brought the answer or answers no request; resumed where a
// 2025 server ended it early with event ids (SEP-1699), once its retry
// field's wait is over; else its request gets the proxy's -32000.
func (a *answer) streamEnded(err error) {
	if a.rd != nil {
		a.rd.Release()
		a.rd = nil
		a.c.untrack(a.body, a.o.flight)
	} else {
		a.body.CloseWithError(nil)
	}
	fasthttp.ReleaseResponse(a.cur)
	a.cur = nil
	if !a.o.isRequest || a.answered {
		a.finish()
		return
	}
	a.c.mu.Lock()
	resumable := a.lastID != "" && a.c.session != "" && !a.c.modern
	a.c.mu.Unlock()
	if !errors.Is(err, io.EOF) || !resumable || a.resumes > 0 && a.events == 0 || a.resumes == maxResumes || a.closed.Load() {
		a.finish()
		a.unanswered(err)
		return
	}
	a.resumes++
	if !a.waitRetry() {
		a.finish()
		a.unanswered(io.EOF)
		return
	}
	resp := a.c.resume(a.lastID)
	if resp == nil {
		a.finish()
		a.unanswered(io.EOF)
		return
	}
	a.read(resp, BodyOf(resp))
}

// finish ends the stream: its request's answer is over.
func (a *answer) finish() {
	if !a.done {
		a.done = true
		a.c.forget(&a.o)
	}
}

// waitRetry waits the stream's retry field (at most maxRetryWait) before
// it is resumed; it reports false if the Conn closed meanwhile.
func (a *answer) waitRetry() bool {
	if a.retry <= 0 {
		return true
	}
	t := time.NewTimer(min(a.retry, maxRetryWait))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-a.c.stop:
		return false
	}
}

// unanswered gives the request whose stream ended without its answer the
// proxy's -32000 (upstream_lost): broken (the connection cut, an event cut
// short), or ended cleanly where nothing else can bring the answer (no
// session to resume in; 2026-07-28, where a broken stream loses the
// request; a stream whose events had no id, which nothing can resume; one
// the upstream would not resume). The sidecar answers a broken upstream
// stream the same way.
func (a *answer) unanswered(err error) {
	switch {
	case errors.Is(err, errStreamCancelled), errors.Is(err, errSSEStopped):
		return // the proxy ended it itself
	case errors.Is(err, io.EOF):
		a.lose(proxy.Loss{Reason: proxy.ReasonLost, MayHaveRun: true}, "the upstream ended the request's stream without answering it")
	default:
		a.lose(proxy.Loss{Reason: proxy.ReasonLost, MayHaveRun: true}, "the upstream's stream broke: "+Brief(err))
	}
}

// lose gives the request the proxy's -32000 for an answer the upstream
// spoiled or lost (why), logged once and counted. A request the proxy cut
// itself, for a cancel or at the Conn's close (whatever error its read
// then returns, such as a closed connection's), owes nothing: the session
// ends its requests itself.
func (a *answer) lose(l proxy.Loss, why string) {
	if a.c.wasCut(&a.o) || a.c.stopped() || a.closed.Load() {
		return
	}
	id := a.o.f.Msgs[0].ID
	Lost(a.c.log, a.c.u.OnUpstreamError, id, l, why)
	a.queue = append(a.queue, proxy.LossReply(id, l, why))
}

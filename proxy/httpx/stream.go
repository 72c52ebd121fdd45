package httpx

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/joinwrite"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/stream"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// errClientGone ends a stream whose client left it.
var errClientGone = errors.New("the client closed the stream")

// errShutdown ends a GET stream when the sidecar stops.
var errShutdown = errors.New("the proxy is shutting down")

// relayed is one upstream response being relayed to the client: a
// stream.Stream (its state, its grace and linger, its upstream body), with
// what the relay knows of the POST it answers.
type relayed struct {
	stream.Stream
	// downgrade, set before the stream is shared, says that its requests
	// were sent upgraded to 2026-07-28 for a client of the 2025 revisions,
	// whose answers go back in that client's shape (see upstream.Downgrade).
	downgrade bool
	// toolsList, set with downgrade, says its request is a tools/list,
	// whose answer teaches the sidecar the tools' Mcp-Param-* headers.
	toolsList bool
	// posting is how far the stream's POST has gone, when it carries
	// requests (posts, set before the stream is shared): a cancel of one
	// of them waits on it (upstream.Posting.BeforeCancel).
	posting upstream.Posting
	posts   bool
}

// newRelayed returns a stream whose timers run on clk.
func newRelayed(clk clock.Clock) *relayed { return &relayed{Stream: stream.Stream{Clock: clk}} }

// post returns how far the stream's POST has gone, if it carries
// requests.
func (st *relayed) post() *upstream.Posting {
	if !st.posts {
		return nil
	}
	return &st.posting
}

// sseRelay is the body of a relayed event stream. fasthttp's server reads
// it on the connection's own goroutine and writes and flushes what each Read
// returns as one chunk: one event, so every event reaches the client at once,
// with no goroutine or pipe between upstream and client. Each JSON-RPC
// message is put to the session's tracker on the way: messages it holds back
// are left out of their event, and an event left empty is not sent.
type sseRelay struct {
	s       *Sidecar
	sess    *session
	st      *relayed
	resp    *fasthttp.Response
	rd      *framing.SSEReader
	f       framing.Frame
	pending []byte // what the last event left to hand out; aliases rd's buffer
	eof     bool   // the upstream stream ended, or the sidecar ended it
	broken  error  // why the stream ended, if not at the upstream's clean end
	// resumable: an event of the stream had an id, so that a client can
	// resume it (GET with Last-Event-ID) once it ends.
	resumable bool
	stopWatch func()
	// evs, for a lingering stream, carries the events a pump goroutine
	// reads, so that the client's side can end while the upstream's is
	// still read; closed at the upstream's end.
	evs chan []byte
	// sides counts the sides of a lingering stream still going, the
	// client's and the pump's: the request is done (requestDone) when
	// both are, since the pump's decisions are still the session's.
	sides atomic.Int32
	// lazyHead is set when the response's headers were not flushed on
	// their own: they go out with the first event, in one write, or, if
	// none comes within headDelay, with a comment (see WriteTo).
	lazyHead bool
	headMu   sync.Mutex // held by the first write, and by the comment's
	headOut  bool       // something was written, or WriteTo returned
	// out and up, when both are known, let each event's write wait for
	// the next write to the client, as long as the upstream's next bytes
	// are already read (package joinwrite).
	out     *joinwrite.Conn
	up      *upstream.Link
	release func()
}

// headDelay is how long an event stream's headers wait to go out with its
// first event, in one write, before a comment sends them (sseRelay.lazyHead).
// Most calls are answered sooner. The sidecar's Queue (closewatch.Queue),
// which waits it, goes off about once per headDelay while streams come.
const headDelay = 10 * time.Millisecond

// newSSERelay starts relaying resp's events for a client on conn. watch,
// if not nil, stops a watch of conn's close begun already, with the same
// effect (clientGone), which the relay takes on: not two registrations.
func (rl relay) newSSERelay(sess *session, st *relayed, resp *fasthttp.Response, conn net.Conn, prefix [][]byte, watch func()) *sseRelay {
	r := &sseRelay{s: rl.s, sess: sess, st: st, resp: resp, rd: outbound{rl.s}.newSSEReader(resp)}
	sess.open.Add(1)
	for _, m := range prefix {
		r.pending = framing.AppendSSEMessage(r.pending, "", m)
	}
	// A client that closes the stream has the upstream's closed too: in
	// 2026-07-28 that is the cancel itself, before it is not one.
	r.stopWatch = watch
	if watch == nil {
		r.stopWatch = rl.s.closes.Watch(conn, func() { rl.clientGone(sess, st) })
	}
	if st.Quit() != nil {
		r.evs = make(chan []byte, 16)
		r.sides.Store(2)
		rl.s.pumps.add(st)
		rl.s.bg.Go(r.pump)
	} else if out, ok := joinwrite.Of(conn); ok {
		// A lingering stream's events come through a channel, which its
		// reader may wait on: those are written at once.
		r.out, r.up = out, upstream.LinkOf(resp)
		r.release = out.Release
	}
	return r
}

// pump reads a lingering stream's upstream events to the end, handing
// them to the client's side while it lasts; then it releases the response.
func (r *sseRelay) pump() {
	defer r.s.pumps.del(r.st)
	defer r.sideDone()
	defer fasthttp.ReleaseResponse(r.resp)
	defer r.rd.Release()
	defer close(r.evs)
	for {
		out, more := r.readEvent()
		if len(out) > 0 {
			select {
			case r.evs <- bytes.Clone(out):
			case <-r.st.Quit(): // the client's side is over: the event goes nowhere
			}
		}
		if !more {
			return
		}
	}
}

// Read hands out the next event to relay, or io.EOF when the stream ends.
func (r *sseRelay) Read(p []byte) (int, error) {
	if !r.next() {
		return 0, io.EOF
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	return n, nil
}

// WriteTo writes each event to w as it comes, one Write per event (one
// chunk, which fasthttp flushes at once), until the stream ends. fasthttp's
// server prefers it to Read, which spares a copy buffer per open stream.
func (r *sseRelay) WriteTo(w io.Writer) (int64, error) {
	if r.lazyHead {
		// Clients must not wait for the headers of a long call (some give
		// up on a response without them): a comment, which no client takes
		// for an event, sends them if no event does first.
		t := r.s.soon.Add(func() { r.flushHead(w) })
		defer func() {
			t.Stop()
			r.flushHead(nil) // from now on w is not ours
		}()
	}
	if r.up != nil {
		// Once the upstream's response is read, its connection serves
		// other requests: the release is not theirs to run.
		defer r.up.OnRead.CompareAndSwap(&r.release, nil)
	}
	var total int64
	for r.next() {
		r.holdWrite()
		n, err := r.write(w, r.pending)
		total += int64(n)
		r.pending = nil
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// holdWrite holds the next write to the client (the event about to be
// written) until the write after it, or until the relay reads the
// upstream's connection for more. The write that ends the body, after the
// last event, takes it along.
func (r *sseRelay) holdWrite() {
	if r.up == nil {
		return
	}
	r.out.HoldNext()
	r.up.OnRead.Store(&r.release)
}

// keepAlive is an SSE comment: it carries no event.
var keepAlive = []byte(":\n\n")

// write writes an event to w; while the head timer may run, under headMu,
// so that its comment and the first event never cross.
func (r *sseRelay) write(w io.Writer, p []byte) (int, error) {
	if !r.lazyHead {
		return w.Write(p)
	}
	r.headMu.Lock()
	defer r.headMu.Unlock()
	r.headOut = true
	return w.Write(p)
}

// flushHead sends the headers with a comment, unless something was written
// already; a nil w only marks the head as out.
func (r *sseRelay) flushHead(w io.Writer) {
	r.headMu.Lock()
	defer r.headMu.Unlock()
	if !r.headOut && w != nil {
		w.Write(keepAlive)
	}
	r.headOut = true
}

// SupportsBodyWriteTo tells fasthttp that WriteTo writes what Read would.
func (r *sseRelay) SupportsBodyWriteTo() bool { return true }

// next sets pending to the next event to relay; it reports false once the
// stream has ended.
func (r *sseRelay) next() bool {
	for len(r.pending) == 0 {
		if r.eof {
			return false
		}
		if r.evs != nil {
			select {
			case ev, ok := <-r.evs:
				r.pending, r.eof = ev, !ok
			case <-r.st.Quit():
				r.eof = true // the client's side ends; the pump reads on
			}
			if r.eof { // the pump's end and the quit may both be ready: either way the final goes
				r.pending = r.takeFinal(r.pending)
			}
			continue
		}
		out, more := r.readEvent()
		r.pending, r.eof = out, !more
	}
	return true
}

// tooLarge accounts for an upstream event over the size limit, which the
// reader skipped, as the stdio relay does for a line: the request it
// answered gets the proxy's error in its place on this stream, and a request
// of the server's it carried is refused to the server.
func (r *sseRelay) tooLarge(tl *framing.EventTooLargeError) []byte {
	toServer, toClient, _ := r.sess.t.TooLarge(proxy.Server, &framing.FrameTooLargeError{Size: tl.Size, Limit: r.s.maxBody, Head: tl.Head})
	if toServer != nil {
		outbound{r.s}.goNotify(r.sess, toServer, nil)
	}
	if toClient == nil {
		return nil
	}
	return framing.AppendSSEMessage(nil, "", toClient)
}

// readEvent reads one upstream event and returns what of it to relay (nil
// for nothing), and whether more may come. At the end it returns the
// proxy's own last message, if the stream has one. A stream that breaks
// (the upstream gone mid-stream, an event cut off at the end) ends with an
// error for each request it was to answer; an event over the size limit is
// skipped, as the wrapper skips an over-long line, and the stream goes on.
func (r *sseRelay) readEvent() (out []byte, more bool) {
	ev, err := r.rd.Next()
	if tl, ok := errors.AsType[*framing.EventTooLargeError](err); ok {
		return r.tooLarge(tl), true
	}
	switch {
	case errors.Is(err, framing.ErrBudgetSpent):
		r.broken = fmt.Errorf("%w (%d bytes, limits.event_memory)", errBudget, outbound{r.s}.budgetSize())
	case err == nil && ev.Cut && ev.HasData:
		r.broken = errors.New("the upstream's stream ended in the middle of an event")
	case err != nil && !errors.Is(err, io.EOF):
		r.broken = fmt.Errorf("the upstream's stream broke: %w", err)
	case err != nil: // the upstream ended the stream, or the sidecar did
		if r.owesAnswers() {
			r.broken = errEndedUnanswered
		}
	case string(ev.Type) == "endpoint":
		r.s.log.Error("the upstream speaks the 2024-11-05 HTTP+SSE transport, which the sidecar does not relay; " +
			"point it at a Streamable HTTP endpoint (protocol 2025-03-26 or later)")
		r.st.CloseWithError(stream.ErrCancelled)
		return nil, false
	default:
		r.resumable = r.resumable || ev.HasID && len(ev.ID) > 0
		return relay{r.s}.filterEvent(r.sess, ev, &r.f, r.st), true
	}
	if r.broken != nil && !r.st.WasCut() {
		out = r.failOpen()
	}
	if r.evs == nil { // a lingering stream's final is its client's side's to take (next)
		out = r.takeFinal(out)
	}
	// Read to its clean end, the upstream connection goes back to the
	// pool now, before the client sees the end; any other end has
	// fasthttp close it.
	if r.broken == errEndedUnanswered {
		r.st.CloseWithError(nil)
	} else {
		r.st.CloseWithError(r.broken)
	}
	return out, false
}

// takeFinal appends the stream's last message, the proxy's own (a
// deadline's error), to out, once. It is taken under the core's lock: a
// deadline's Expire cancels the call and sets this message in one step
// under it, while an answer from the upstream is decided without it, so
// an answer suppressed for the deadline may end the stream before the
// message is set (before, the client got an empty event stream, and the
// message went to a stream already forgotten: 1 call in about 30,000 of
// TestDeadlinesRacingAnswers/sse at -cpu 4).
func (r *sseRelay) takeFinal(out []byte) []byte {
	r.sess.core.Lock()
	final := r.st.TakeFinal()
	r.sess.core.Unlock()
	if final != nil {
		out = framing.AppendSSEMessage(out, "", final)
	}
	return out
}

// errBudget ends a client's stream whose events the sidecar had no memory
// left for.
var errBudget = errors.New("the sidecar's memory for upstream events is spent")

// errEndedUnanswered ends a client's stream whose upstream stream ended,
// cleanly, without the answers it was to carry.
var errEndedUnanswered = errors.New("the upstream ended the request's stream without answering it")

// owesAnswers reports whether the upstream, having ended this stream, left
// requests unanswered that nobody can resume: the client did not leave it,
// and no GET of the session's can resume the stream to bring the answers
// (a sessionless request; 2026-07-28, where streams do not resume; a stream
// whose events had no id, which a resumption names, and whose answers the
// server may send on no other stream). The bridge answers such a request
// the same way.
func (r *sseRelay) owesAnswers() bool {
	if r.st.WasCut() || r.resumable && r.sess.sessionID() != "" && !r.sess.protocolVersion().CancelsByClose() {
		return false
	}
	return r.sess.awaitsOn(r.st)
}

// newSSEReader reads an upstream response's event stream, within the
// sidecar's limits.
func (ob outbound) newSSEReader(resp *fasthttp.Response) *framing.SSEReader {
	rd := framing.NewSSEReader(resp.BodyStream(), ob.s.maxBody)
	rd.SetBudget(ob.s.budget)
	return rd
}

func (ob outbound) budgetSize() int64 { return cmp.Or(ob.s.EventMemory, DefaultEventMemory) }

// failOpen answers, with the proxy's own error, each request still waiting
// for its answer on a stream that broke, and logs the break once.
func (r *sseRelay) failOpen() []byte {
	var out []byte
	n := 0
	// The upstream's doing, but for the sidecar's own memory bound.
	loss, upstreams := proxy.Loss{Reason: proxy.ReasonLost, MayHaveRun: true}, !errors.Is(r.broken, errBudget)
	for _, c := range r.sess.callsOn(r.st) {
		var reply []byte
		if upstreams {
			reply = r.sess.t.FailLost(c, loss, r.broken.Error())
		} else {
			reply = r.sess.t.Fail(c, proxy.CodeServerGone, r.broken.Error())
		}
		if reply != nil {
			out = framing.AppendSSEMessage(out, "", reply)
			n++
		}
	}
	r.s.log.Error("upstream stream broke", zap.String("session", r.sess.scope), zap.Int("requests_failed", n), zap.Error(r.broken))
	if n > 0 && r.s.OnUpstreamError != nil {
		r.s.OnUpstreamError()
	}
	return out
}

// Close is called by fasthttp once the response is done. Done before the
// upstream's end means that writing to the client failed: it has gone.
func (r *sseRelay) Close() error {
	r.stopWatch()
	r.sess.open.Add(-1)
	if !r.eof {
		relay{r.s}.clientGone(r.sess, r.st)
	}
	r.sess.detach(r.st)
	if r.evs == nil {
		r.st.CloseWithError(r.broken)
		r.rd.Release()
		fasthttp.ReleaseResponse(r.resp)
		relay{r.s}.requestDone(r.sess)
		return nil
	} // else the pump ends the upstream's side, and releases the response
	r.sideDone()
	return nil
}

// sideDone ends one side of a lingering stream; the request is done once
// both are.
func (r *sseRelay) sideDone() {
	if r.sides.Add(-1) == 0 {
		relay{r.s}.requestDone(r.sess)
	}
}

// clientGone handles a client that closed a response stream: the upstream
// stream is closed too, and, where configured, the requests it was to
// answer are cancelled if the client does not resume in time.
func (rl relay) clientGone(sess *session, st *relayed) {
	calls := sess.callsOn(st)
	if sess.protocolVersion().CancelsByClose() {
		// Closing the upstream stream is the cancel itself: decided first,
		// then carried out, so that nothing hears of it before it counts.
		// A cancel the governor keeps back (reissue: join) is carried out
		// when it says (Cancel): the upstream's stream is read on till then.
		if len(calls) == 0 && sess.keeps(st) { // its client's side went before
			return
		}
		kept := len(calls) > 0
		for _, c := range calls {
			sess.core.Cancel(c, proxy.SourceDisconnect, "client closed the stream", nil)
			if sess.core.Deferred(c) {
				sess.deferCancel(c, 0) // nobody reads the client's side: no grace
			} else {
				kept = false
			}
		}
		if !kept {
			st.post().Cut() // before the server's headers, its connection is the stream
			st.CloseWithError(errClientGone)
		}
		if len(calls) > 0 {
			streamLeft(rl.s.log.With(zap.String("session", sess.scope)), len(calls), leftCancelled)
		}
		return
	}
	st.CloseWithError(errClientGone)
	if len(calls) == 0 {
		return
	}
	log := rl.s.log.With(zap.String("session", sess.scope))
	if sess.sessionID() == "" { // nothing to resume, and no cancel in 2025
		streamLeft(log, len(calls), leftRunsOn)
		return
	}
	came := func(left int64) bool { return sess.lastResume.Load() > left } // for its answers
	rl.s.afterDisconnect(log, len(calls), came, func() {
		for _, c := range calls {
			sess.core.Cancel(c, proxy.SourceDisconnect, "client disconnected", nil)
		}
	})
}

// filterEvent returns the bytes to relay for one event: the event itself
// when all of its messages pass unchanged, a rebuilt event when some were
// renamed or held back, nil when nothing is left. Events without data
// (priming events, keep-alive comments) pass as they are. An event whose
// lines end in a lone "\r" goes with "\n" instead, so that a client that
// splits lines only on "\n" reads the event the sidecar read.
func (rl relay) filterEvent(sess *session, ev *framing.Event, f *framing.Frame, st *relayed) []byte {
	if !ev.HasData || len(ev.Data) == 0 {
		return framing.NormalizeLineEnds(ev.Raw)
	}
	if err := f.Parse(ev.Data); err != nil {
		sess.t.Invalid(proxy.Server, err, ev.Data)
		return nil
	}
	d := rl.decideFrame(sess, proxy.Server, f, proxy.TraceContext{})
	data := d.Data
	if st != nil && st.downgrade && data != nil {
		if down := rl.downgrade(st, data); len(down) != len(data) || st.toolsList {
			data, d.Same = down, false
		}
	}
	switch {
	case d.Same:
		return framing.NormalizeLineEnds(ev.Raw)
	case data == nil:
		return nil
	}
	out := make([]byte, 0, len(data)+64)
	if len(ev.Type) > 0 {
		out = append(append(append(out, "event: "...), ev.Type...), '\n')
	}
	if ev.HasID {
		out = append(append(append(out, "id: "...), ev.ID...), '\n')
	}
	for line := range bytes.SplitSeq(data, []byte("\n")) { // a message spread over several data lines
		out = append(append(append(out, "data: "...), line...), '\n')
	}
	return append(out, '\n')
}

// decided is what the session's core made of a frame (proxy.Plan), with
// what the relay adds to it.
type decided struct {
	proxy.Plan
	// upgraded, if not nil, is the request as it is sent: a 2026-07-28
	// one, for a client of the 2025 revisions (http.upgrade_stateless).
	upgraded *framing.Message
	// taken is where the cancels' requests' POSTs have got to: the
	// cancels wait on them.
	taken []*upstream.Posting
}

// decideFrame has the session's core decide a frame (proxy.Session's
// DecideFrame); parent is the trace context of the HTTP request that
// brought it, if any. A request the governor holds waits on a hold; the
// streams of requests the client cancels end after the grace, and each
// other request in flight under a cancelled id is told its own cancel
// (it was renamed upstream).
func (rl relay) decideFrame(sess *session, from proxy.Peer, f *framing.Frame, parent proxy.TraceContext) decided {
	d := decided{Plan: sess.core.DecideFrame(from, f, parent, newHold)}
	for _, c := range d.Cancels {
		d.taken = append(d.taken, sess.cancelled(c, rl.s.grace))
	}
	for _, c := range d.Deferred { // the client is freed; the governor sends the cancel
		sess.deferCancel(c, rl.s.grace)
	}
	for _, mc := range d.More {
		p := sess.cancelled(mc.Call, rl.s.grace)
		if sess.sessionID() != "" && !sess.protocolVersion().CancelsByClose() {
			outbound{rl.s}.goNotify(sess, mc.Notice, []*upstream.Posting{p}, mc.Call)
		}
	}
	return d
}

// pumpSet is the streams whose upstream a pump reads.
type pumpSet struct {
	mu sync.Mutex
	m  map[*relayed]struct{}
}

func (p *pumpSet) add(st *relayed) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[*relayed]struct{}{}
	}
	p.m[st] = struct{}{}
}

func (p *pumpSet) del(st *relayed) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.m, st)
}

// cutAll ends every stream a pump reads, and its upstream read with it.
func (p *pumpSet) cutAll() {
	p.mu.Lock()
	sts := slices.Collect(maps.Keys(p.m))
	p.mu.Unlock()
	for _, st := range sts { // outside the lock: ending waits for a read in progress
		st.CloseWithError(stream.ErrCancelled)
	}
}

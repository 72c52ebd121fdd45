package proxy

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// CodeServerGone is the JSON-RPC error code of the proxy's answer to a
// request whose server exited before answering. -32000 is what the
// TypeScript SDK calls ConnectionClosed, so clients treat it alike.
const CodeServerGone = -32000

// Defaults for TrackerOptions.
const (
	DefaultRetireAfter = 10 * time.Minute
	DefaultRetireMax   = 1 << 16
)

// proxyName goes in the data of every error the proxy writes itself, so that
// no one mistakes it for the server's.
const proxyName = "mcp-cancel-proxy"

// Peer names one end of a session.
type Peer uint8

// The two peers.
const (
	Client Peer = iota
	Server
)

// String names the peer.
func (p Peer) String() string {
	if p == Client {
		return "client"
	}
	return "server"
}

// Other returns the peer at the other end.
func (p Peer) Other() Peer { return 1 - p }

// TrackerOptions configures a Tracker. The zero value is usable.
type TrackerOptions struct {
	// Logger receives the decisions' logs. If nil, nothing is logged.
	Logger *zap.Logger
	// Scope, if its Key is set, is added to each line the tracker writes
	// (an HTTP front's session name): a field added when a line is written
	// costs nothing for a session that logs nothing, where a logger made
	// With it costs several allocations per session.
	Scope zap.Field
	// RetireAfter is how long a cancelled request is remembered, so that its
	// late response and progress are recognised as such. A response that
	// comes later still never reaches the issuer: it is dropped as unknown.
	// If zero, DefaultRetireAfter.
	RetireAfter time.Duration
	// RetireMax bounds how many cancelled requests are remembered per
	// direction. If zero, DefaultRetireMax.
	RetireMax int
	// Now is the clock. If nil, time.Now.
	Now func() time.Time
	// OnEvent, if set, is called for every decision, on the goroutine that
	// asked for it. It must not block.
	OnEvent func(Event)
	// Observer, if set, counts every decision, for metrics.
	Observer Observer
	// Totals, if set, gets every count the tracker makes besides the
	// tracker's own Stats: an HTTP front's sessions share one, so that
	// what the front did outlives the sessions that did it.
	Totals *Counters
	// AllowSharedIDs lets the client's requests in flight share an id: a
	// transport that carries each request's answer on a route of its own
	// (an HTTP response stream) keeps them apart; each after the first is
	// renamed toward the server, and a cancel naming the id cancels each
	// of them (Outcome.More), logged as ambiguous. Without it a request
	// whose id is in flight is refused.
	AllowSharedIDs bool
	// OnCancel, if set, is told of each cancel of a client's request the
	// tracker accepts (the client's, or one the proxy makes on its behalf),
	// with its source, for metrics. It runs on the deciding goroutine and
	// must not block.
	OnCancel func(Source)
	// Governor, if set, applies per-request policy to the client's requests.
	Governor Governor
	// Tracer, if set, follows each relayed request as a span of a trace,
	// and passes the trace context on in the request's params._meta.
	Tracer Tracer
	// LogPayloads adds, at debug level, the start of each malformed or
	// oversized message to the log. Default false: logs tell sizes and
	// kinds, never what a message says (tool arguments may hold secrets).
	LogPayloads bool
}

// Observer is told of each decision as it is made. Observe is called
// concurrently, on the hot path: it must be cheap and must not block.
type Observer interface {
	Observe(a Action, from Peer)
}

// Tracker decides, for every message of one MCP session, whether it passes,
// is renamed, or is held back. It keeps the ledger of requests in flight in
// each direction and does no I/O: a transport feeds it messages and carries
// out what it decides. It is safe for concurrent use by the two directions.
type Tracker struct {
	opts  TrackerOptions
	peers [2]peerState
	stats stats
	// ledgers are the peers' ledgers (client to server, server to
	// client), kept in the Tracker: a session is made per request without
	// one, and each allocation of it counts.
	ledgers [2]ledger
}

// peerState is one peer as the tracker sees it.
type peerState struct {
	issued  *ledger // requests this peer sends
	answers *ledger // requests this peer answers
	from    zap.Field
}

// Call is a request the tracker has seen forwarded.
type Call = call

// Outcome is what the tracker decided about one message.
type Outcome struct {
	Verdict Verdict
	// Rewritten, when set, replaces the message's bytes: an id or progress
	// token renamed so that it cannot be confused with an older one.
	Rewritten []byte
	// Reply, when set, is an error response for the sender, in place of
	// forwarding the message.
	Reply []byte
	// Request is the call a forwarded request opened.
	Request *Call
	// Cancelled is the call an accepted cancel names.
	Cancelled *Call
	// More are the other calls an accepted cancel names, with their cancel
	// notifications for the receiver, when requests in flight share its
	// id (TrackerOptions.AllowSharedIDs): the transport sends each.
	More []Cancellation
	// Trace is the trace context the forwarded request carries, when
	// traced: a transport with headers of its own (HTTP) sets them too.
	Trace TraceContext
	// Hold asks the transport to keep the request until the Governor
	// dispatches it; Timed says it has a deadline; WantsLate that its late
	// answer is wanted (see Admission).
	Hold, Timed, WantsLate bool
	// Withdrawn says that Cancelled was still held (Session.Decide): it is
	// withdrawn, and neither it nor the cancel reaches the server (the
	// Verdict is Drop).
	Withdrawn bool
	// Deferred says that the cancel of Cancelled is the governor's to send
	// (Admission.DeferCancel): the Verdict is Drop, and the client is
	// freed all the same.
	Deferred bool
	// DeferCancel says that the cancel of Request may be deferred so
	// (Admission.DeferCancel): the transport must read its answer on after
	// a cancel until the governor sends the cancel (Carrier.Cancel).
	DeferCancel bool
	// For is the request a forwarded message about a request of the
	// other peer's belongs to (an answer, progress, the server's end of a
	// subscription), for a transport that routes each to where its
	// request came from; Last says it is that request's last message.
	For  *Call
	Last bool
}

// NewTracker returns a Tracker configured by opts.
func NewTracker(opts TrackerOptions) *Tracker {
	t := &Tracker{}
	t.init(opts)
	return t
}

// init sets up a zero Tracker in place, configured by opts.
func (t *Tracker) init(opts TrackerOptions) {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.RetireAfter <= 0 {
		opts.RetireAfter = DefaultRetireAfter
	}
	if opts.RetireMax <= 0 {
		opts.RetireMax = DefaultRetireMax
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	t.opts = opts
	c2s, s2c := &t.ledgers[0], &t.ledgers[1]
	c2s.init(ClientToServer, opts.Now, opts.RetireAfter, opts.RetireMax)
	c2s.allowShared = opts.AllowSharedIDs
	s2c.init(ServerToClient, opts.Now, opts.RetireAfter, opts.RetireMax)
	t.peers[Client] = peerState{issued: c2s, answers: s2c, from: zap.String("from", "client")}
	t.peers[Server] = peerState{issued: s2c, answers: c2s, from: zap.String("from", "server")}
}

// Stats returns the counters so far.
func (t *Tracker) Stats() Stats { return t.stats.snapshot() }

// count adds n to one of the tracker's counters, and to its Totals.
func (t *Tracker) count(c counter, n int64) {
	t.stats[c].Add(n)
	if t.opts.Totals != nil {
		t.opts.Totals.c[c].Add(n)
	}
}

// Logger returns the logger of one peer's messages.
func (t *Tracker) Logger(p Peer) *zap.Logger {
	if t.opts.Scope.Key != "" {
		return t.opts.Logger.With(t.opts.Scope, t.peers[p].from)
	}
	return t.opts.Logger.With(t.peers[p].from)
}

// write writes a checked line with fields and the tracker's Scope.
func (t *Tracker) write(ce *zapcore.CheckedEntry, fields ...zap.Field) {
	if t.opts.Scope.Key != "" {
		fields = append(fields, t.opts.Scope)
	}
	ce.Write(fields...)
}

// log writes a line about a peer's message at lvl, naming the peer. The
// peer is a field of each line rather than of a logger made for it: a
// session (each sessionless HTTP request is one) logs little, if at all.
func (t *Tracker) log(p Peer, lvl zapcore.Level, msg string, fields ...zap.Field) {
	if ce := t.opts.Logger.Check(lvl, msg); ce != nil {
		t.write(ce, append(fields, t.peers[p].from)...)
	}
}

// InFlight returns how many requests are in flight in each direction.
func (t *Tracker) InFlight() (clientToServer, serverToClient int) {
	a, _ := t.peers[Client].issued.counts()
	b, _ := t.peers[Server].issued.counts()
	return a, b
}

// Awaited reports whether the client still waits for the server's answer
// to c: in flight, neither answered, cancelled nor failed.
func (t *Tracker) Awaited(c *Call) bool {
	l := t.peers[Client].issued
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inFlightLocked(c)
}

// Decide decides one valid message from a peer.
func (t *Tracker) Decide(from Peer, m *framing.Message) Outcome {
	return t.DecideIn(from, m, TraceContext{})
}

// DecideIn decides one valid message from a peer that came in a trace
// context of the transport's own (an HTTP request's headers): a request
// with none in its params._meta continues that one.
func (t *Tracker) DecideIn(from Peer, m *framing.Message, parent TraceContext) Outcome {
	return t.decideIn(from, m, parent, nil)
}

// decideIn is DecideIn; a client's cancel accepted, when later is not nil,
// leaves in *later what accepting it tells the governor and the feed.
func (t *Tracker) decideIn(from Peer, m *framing.Message, parent TraceContext, later *func()) Outcome {
	switch m.Kind {
	case framing.KindRequest:
		return t.request(from, m, parent)
	case framing.KindResponse:
		return t.response(from, m)
	}
	switch m.Method {
	case framing.MethodCancelled:
		return t.cancel(from, m, later)
	case framing.MethodProgress:
		return t.progress(from, m)
	case framing.MethodTaskStatus:
		t.endTask(from, taskStatusOver(m))
	default:
		if t.afterTask(from, m) {
			return Outcome{Verdict: Drop}
		}
		if m.SubscriptionID.IsValid() {
			return t.subscribed(from, m)
		}
	}
	t.forwarded(from, m.Kind, m.Method, m.ID)
	return Outcome{}
}

func (t *Tracker) request(from Peer, m *framing.Message, parent TraceContext) Outcome {
	p := &t.peers[from]
	var span Span
	if t.opts.Tracer != nil {
		span = t.opts.Tracer.Start(from, m, parent)
	}
	c, v := p.issued.begin(m, span)
	if v == Drop {
		if span != nil {
			span.End("refused: "+reasonDuplicateID, true)
		}
		return Outcome{Verdict: Drop, Reply: t.refuseDuplicate(from, m)}
	}
	o := Outcome{Request: c}
	watch := false
	if g := t.opts.Governor; g != nil && from == Client {
		a := g.Admit(c, m)
		o.Hold, o.Timed, o.WantsLate = a.Hold, a.Timed, a.WantsLate
		c.deferCancel, o.DeferCancel = a.DeferCancel, a.DeferCancel
		c.rewrite = a.Rewrite
		watch = a.WatchProgress && m.TokenSpan == (framing.Span{}) && !m.HasTask
	}
	t.forwarded(from, m.Kind, m.Method, m.ID) // once admitted: its event says the decision is made, deadline and all
	if c.aliased() || c.tokenAliased() {
		t.log(from, zapcore.DebugLevel, "request id or progress token reused while a cancelled request may still use it; renamed upstream",
			zap.Stringer("id", c.id), zap.Stringer("upstream_id", c.upID),
			zap.Stringer("token", c.token), zap.Stringer("upstream_token", c.upToken))
		o.Rewritten = spliceRequest(m, c)
	}
	if watch {
		o.Rewritten = t.watchProgress(from, m, c, o.Rewritten)
	}
	if span != nil {
		o.Trace = span.Context()
		o.Rewritten = t.passTrace(from, m, o)
	}
	return o
}

// passTrace returns the request's bytes with its span's trace context in
// params._meta, for the receiver to continue; as they were (Rewritten, or
// nil) if that cannot be done.
func (t *Tracker) passTrace(from Peer, m *framing.Message, o Outcome) []byte {
	if o.Trace.Parent == "" {
		return o.Rewritten
	}
	if o.Rewritten != nil { // renamed (rare): find its fields again
		if m = reparse(o.Rewritten); m == nil {
			return o.Rewritten
		}
	}
	b, err := framing.WithTraceContext(m, o.Trace.Parent, o.Trace.State)
	if err != nil {
		t.log(from, zapcore.DebugLevel, "trace context not passed on: the request's params or _meta is no object",
			zap.String("method", m.Method), zap.Stringer("id", m.ID))
		return o.Rewritten
	}
	return b
}

// reparse returns the one message of a request the tracker rewrote, to
// find its fields again; nil if it cannot be read.
func reparse(raw []byte) *framing.Message {
	var f framing.Frame
	if f.Parse(raw) != nil || len(f.Msgs) != 1 {
		return nil
	}
	return &f.Msgs[0]
}

// watchProgress returns the bytes of request m (or of rewritten, the
// tracker's rewriting of it) with a progress token of the proxy's own in
// params._meta, where the spec puts it, for a governor that resets c's
// deadline on progress though its issuer asked for none; as they were if
// that cannot be done (params or _meta no object).
func (t *Tracker) watchProgress(from Peer, m *framing.Message, c *call, rewritten []byte) []byte {
	if rewritten != nil {
		if m = reparse(rewritten); m == nil {
			return rewritten
		}
	}
	tok := t.peers[from].issued.watch(c)
	b, err := framing.AddMeta(m, tok.AppendJSON([]byte(`"progressToken":`)))
	if err != nil {
		t.log(from, zapcore.DebugLevel, "no progress token added for the deadline to watch: the request's params or _meta is no object",
			zap.String("method", m.Method), zap.Stringer("id", c.id))
		return rewritten
	}
	return b
}

// refuseDuplicate accounts for a request whose id the sender already has
// in flight, which is not forwarded, and returns the error owed to it.
func (t *Tracker) refuseDuplicate(from Peer, m *framing.Message) []byte {
	t.dropped(from, t.peers[from].issued.dir, m, m.ID, reasonDuplicateID, zapcore.WarnLevel)
	return t.ErrorReply(m.ID, framing.CodeInvalidRequest, "Invalid Request: "+reasonDuplicateID)
}

// spliceRequest returns a request's bytes with its id and progress token
// replaced by their receiver-side aliases, whichever are aliased.
func spliceRequest(m *framing.Message, c *call) []byte {
	edits := make([]framing.Edit, 0, 2)
	if c.aliased() {
		edits = append(edits, framing.Edit{Span: m.IDSpan, To: c.upID})
	}
	if c.tokenAliased() {
		edits = append(edits, framing.Edit{Span: m.TokenSpan, To: c.upToken})
	}
	return framing.Rewrite(nil, m.Raw, edits...)
}

func (t *Tracker) response(from Peer, m *framing.Message) Outcome {
	if !m.ID.IsValid() { // an error about a message the peer could not read
		t.forwarded(from, m.Kind, m.Method, m.ID)
		return Outcome{}
	}
	p := &t.peers[from]
	c, v := p.answers.complete(m.ID, taskCreated(m))
	switch v {
	case Silence:
		t.silenced(from, p.answers.dir, m, m.ID, "second answer to a request already answered")
		return Outcome{Verdict: Drop}
	case Drop:
		t.dropped(from, p.answers.dir, m, m.ID, reasonUnknownReply, zapcore.WarnLevel)
		return Outcome{Verdict: Drop}
	case Suppress:
		c.Span().Event(EventLateSuppressed)
		t.count(cResponsesSuppressed, 1)
		if g := t.opts.Governor; g != nil && from == Server {
			g.Observe(Change{Kind: ChangeLate, Call: c, Msg: m})
		}
		t.note(from, p.answers.dir, ActSuppressed, m.Kind, c.method, c.id, "late response to a cancelled request", zapcore.DebugLevel)
		return Outcome{Verdict: Suppress}
	}
	if c.onAnswer != nil {
		c.onAnswer(m)
		t.emit(from, ActTaken, m.Kind, c.method, c.id, "")
		return Outcome{Verdict: Drop}
	}
	if c.span != nil {
		c.span.Answered(m, 0, "")
	}
	if c.method == "tasks/get" || c.method == "tasks/cancel" || c.method == "tasks/result" {
		t.endTask(from, taskOver(c.method, m))
	}
	if g := t.opts.Governor; g != nil && from == Server {
		if c.method == framing.MethodInitialize {
			g.Observe(Change{Kind: ChangeServerReady, Msg: m})
		}
		g.Observe(Change{Kind: ChangeAnswered, Call: c, Msg: m})
	}
	t.forwarded(from, m.Kind, c.method, c.id) // the event comes after Observe, as a cancel's
	if c.rewrite && !m.IsError {
		if rw, ok := t.opts.Governor.(Rewriter); ok {
			if res := rw.RewriteResult(c, m); res != nil {
				return Outcome{Rewritten: rewritten(c, res), For: c, Last: true}
			}
		}
	}
	if c.aliased() {
		return Outcome{Rewritten: framing.Splice(nil, m.Raw, m.IDSpan, c.id), For: c, Last: true}
	}
	return Outcome{For: c, Last: true}
}

// subscribed forwards a notification of a subscription (2026-07-28: its
// _meta names the subscriptions/listen request it belongs to) as about that
// request, so that it goes where the request's answer would, and under the
// issuer's id where the request was renamed for its receiver.
func (t *Tracker) subscribed(from Peer, m *framing.Message) Outcome {
	c := t.peers[from].answers.listening(m.SubscriptionID)
	if c == nil {
		t.forwarded(from, m.Kind, m.Method, m.ID)
		return Outcome{}
	}
	t.forwarded(from, m.Kind, m.Method, c.id)
	if c.aliased() {
		return Outcome{Rewritten: framing.Splice(nil, m.Raw, m.SubscriptionIDSpan, c.id), For: c}
	}
	return Outcome{For: c}
}

// tornDown forwards the server's cancel that ends a subscriptions/listen
// of the client's to the client, under the client's id: the request is
// over, as if answered.
func (t *Tracker) tornDown(m *framing.Message, c *call) Outcome {
	t.forwarded(Server, m.Kind, m.Method, c.id)
	if c.span != nil {
		c.span.End("subscription ended by the server", false)
	}
	if g := t.opts.Governor; g != nil {
		g.Observe(Change{Kind: ChangeAnswered, Call: c})
	}
	if c.aliased() {
		return Outcome{Rewritten: framing.Splice(nil, m.Raw, m.RequestIDSpan, c.id), For: c, Last: true}
	}
	return Outcome{For: c, Last: true}
}

// MaxReason is the most of a cancel's reason the proxy writes anywhere
// (logs, the audit trail, hook events, spans, the status page): a client
// chooses it, and one of 8 MiB made 8 MiB log lines.
const MaxReason = 256

// CapReason returns reason cut to MaxReason bytes (at a character's
// boundary), marked as cut, with the length it had.
func CapReason(reason string) string {
	if len(reason) <= MaxReason {
		return reason
	}
	cut := MaxReason
	for cut > 0 && !utf8.RuneStart(reason[cut]) {
		cut--
	}
	return reason[:cut] + "… (cut: " + strconv.Itoa(len(reason)) + " bytes)"
}

// cancel decides a cancel. Once the ledger has accepted it, the governor
// is told (it arms the late window, starts the hooks' wait) and then the
// event is said (cancel_accepted); with later not nil these two are left
// in *later, for the transport to run once it has sent the cancel on
// (Session.DecideThen).
func (t *Tracker) cancel(from Peer, m *framing.Message, later *func()) Outcome {
	if from == Server && m.RequestID.IsValid() {
		if c := t.peers[Server].answers.teardown(m.RequestID); c != nil {
			return t.tornDown(m, c)
		}
	}
	p := &t.peers[from]
	reason := reasonNoRequestID
	var c *call
	if m.RequestID.IsValid() {
		c, reason = p.issued.cancel(m.RequestID)
	}
	g := t.opts.Governor
	if from != Client {
		g = nil
	}
	if reason != "" {
		t.count(cCancelsDropped, 1)
		if g != nil && m.RequestID.IsValid() {
			g.Observe(Change{Kind: ChangeCancelMissed, ID: m.RequestID})
		}
		t.note(from, p.issued.dir, ActCancelDropped, m.Kind, m.Method, m.RequestID, reason, zapcore.DebugLevel)
		return Outcome{Verdict: Drop}
	}
	t.count(cCancelsForwarded, 1)
	why := CapReason(m.Reason) // the cancel goes on whole; what the proxy writes of it is capped
	if from == Client && t.opts.OnCancel != nil {
		t.opts.OnCancel(SourceClient)
	}
	t.cancelTraced(from, c, SourceClient, why)
	dir, kind := p.issued.dir, m.Kind
	accepted := func() {
		if g != nil {
			g.Observe(Change{Kind: ChangeCancelled, Call: c, Source: SourceClient, Reason: why})
		}
		// The event comes once the governor has armed what the cancel
		// starts (its late window, a re-issue's grace): whoever waits on
		// the event and then moves the clock moves it past them.
		t.noteCancel(from, dir, kind, c, SourceClient, why)
	}
	if later != nil {
		*later = accepted
	} else {
		accepted()
	}
	o := Outcome{Cancelled: c}
	if from == Client && t.opts.AllowSharedIDs {
		o.More = t.cancelShared(m.RequestID, why)
	}
	if c.aliased() {
		o.Rewritten = framing.Splice(nil, m.Raw, m.RequestIDSpan, c.upID)
	}
	return o
}

func (t *Tracker) progress(from Peer, m *framing.Message) Outcome {
	if !m.Token.IsValid() {
		t.forwarded(from, m.Kind, m.Method, m.Token)
		return Outcome{}
	}
	p := &t.peers[from]
	c, v := p.answers.progress(m.Token)
	if c != nil && c.ownToken || c == nil && from == Server && m.Token.HasPrefix(ownTokenPrefix) {
		return t.ownProgress(from, m, c)
	}
	if v == Silence {
		why := "progress for a token no request in flight carries"
		if c != nil {
			why = "progress after its request ended"
		}
		t.silenced(from, p.answers.dir, m, m.Token, why)
		return Outcome{Verdict: Drop}
	}
	if v == Suppress {
		c.Span().Event(EventProgressDropped)
		t.count(cProgressSuppressed, 1)
		if g := t.opts.Governor; g != nil && from == Server {
			g.Observe(Change{Kind: ChangeProgress, Call: c, Msg: m}) // a re-issue that joined the call may want it
		}
		t.note(from, p.answers.dir, ActSuppressed, m.Kind, m.Method, c.id, "progress for a cancelled request", zapcore.DebugLevel)
		return Outcome{Verdict: Suppress}
	}
	t.forwarded(from, m.Kind, m.Method, c.id) // the request it reports on, as every other event names it

	// The proxy's own request, under its client's token: a hosted task's call.
	if c.onAnswer != nil {
		return Outcome{}
	}
	if g := t.opts.Governor; g != nil && from == Server {
		g.Observe(Change{Kind: ChangeProgress, Call: c, Msg: m})
	}
	if c.tokenAliased() {
		return Outcome{Rewritten: framing.Splice(nil, m.Raw, m.TokenSpan, c.token), For: c}
	}
	return Outcome{For: c}
}

// ownProgress takes progress sent under a token of the proxy's own (see
// watchProgress): the governor sees it, while its call is known; the
// client, which asked for no progress, never does.
func (t *Tracker) ownProgress(from Peer, m *framing.Message, c *call) Outcome {
	id := m.Token
	if c != nil {
		id = c.id
		if g := t.opts.Governor; g != nil {
			g.Observe(Change{Kind: ChangeProgress, Call: c, Msg: m})
		}
	}
	t.log(from, zapcore.DebugLevel, "progress under the proxy's own token taken, for the deadline: the client asked for none",
		zap.Stringer("id", id), zap.Stringer("upstream_token", m.Token))
	t.emit(from, ActTaken, m.Kind, m.Method, id, "")
	return Outcome{Verdict: Drop}
}

// Joined records that a held request of the client's was answered by the
// proxy with the answer of a call already running (reissue: join): it was
// never sent, and no answer of the server's is owed it.
func (t *Tracker) Joined(c *Call) {
	p := &t.peers[Client]
	p.issued.settle(c)
	t.count(cJoined, 1)
	t.count(cForwarded, -1) // counted when it was queued; it never left
	t.note(Client, p.issued.dir, ActJoined, framing.KindRequest, c.method, c.id,
		"joined the call already running: answered with its answer, never sent", zapcore.InfoLevel)
	if c.span != nil {
		c.span.End("joined the call already running", false)
	}
}

// Withdraw records that a cancelled request was never sent (it was still
// queued in the proxy when its cancel came): no late response can come.
func (t *Tracker) Withdraw(from Peer, c *Call) {
	p := &t.peers[from]
	p.issued.forget(c)
	t.count(cWithdrawn, 1)
	t.count(cForwarded, -1) // counted when it was queued; it never left
	c.Span().Event(EventWithdrawn)
	if g := t.opts.Governor; g != nil && from == Client {
		g.Observe(Change{Kind: ChangeWithdrawn, Call: c})
	}
	t.note(from, p.issued.dir, ActWithdrawn, framing.KindRequest, c.method, c.id,
		"cancelled before it was sent: neither the request nor the cancel reaches the "+from.Other().String(), zapcore.InfoLevel)
}

// Invalid accounts for a frame that failed to parse, or an invalid element
// of a batch, and returns the error response owed to a client (-32700, or
// -32600 for valid JSON that is no JSON-RPC message); a server gets a log
// line only, and a nil reply.
func (t *Tracker) Invalid(from Peer, err error, raw []byte) []byte {
	t.count(cDropped, 1)
	t.log(from, zapcore.WarnLevel, "malformed message dropped", zap.Error(err), zap.Int("bytes", len(raw)))
	t.payload(from, raw)
	t.emit(from, ActDropped, framing.KindInvalid, "", framing.ID{}, err.Error())
	if from != Client {
		return nil
	}
	code, msg := framing.CodeParseError, "Parse error"
	var ie *framing.InvalidError
	if errors.As(err, &ie) {
		code, msg = framing.CodeInvalidRequest, "Invalid Request"
	}
	return t.ErrorReply(framing.ErrorID(err), code, msg+": "+err.Error())
}

// TooLarge accounts for a frame over the size limit, which was skipped, and
// returns what is owed so that nobody waits for it forever: an error for the
// sender of a request it held (or any client), and an error for the issuer
// of the request a response it held answered, which is about.
func (t *Tracker) TooLarge(from Peer, tl *framing.FrameTooLargeError) (toSender, toOther []byte, about *Call) {
	t.count(cDropped, 1)
	id, isResponse, ok := framing.PeekID(tl.Head)
	t.log(from, zapcore.ErrorLevel, "frame over the size limit dropped", zap.Int64("size", tl.Size), zap.Int("limit", tl.Limit),
		zap.Stringer("id", id))
	t.payload(from, tl.Head)
	t.emit(from, ActDropped, framing.KindInvalid, "", id, tl.Error())
	switch {
	case ok && isResponse:
		if c, v := t.peers[from].answers.complete(id, nil); v == Forward {
			return nil, t.ErrorReply(c.id, framing.CodeInternalError,
				fmt.Sprintf("Internal error: the %s's response was dropped: %v", from, tl)), c
		}
	case ok || from == Client:
		return t.ErrorReply(id, framing.CodeInvalidRequest, "Invalid Request: "+tl.Error()), nil, nil
	}
	return nil, nil, nil
}

// FailInFlight ends every client request still in flight, whose server
// is gone (it exited, or was replaced), and returns an error response for
// each: CodeServerGone with the message why, upstream_lost, and the server
// may have run it (it was sent).
func (t *Tracker) FailInFlight(why string) []Reply {
	var replies []Reply
	lost := Loss{Reason: ReasonLost, MayHaveRun: true}
	for _, c := range t.peers[Client].issued.failAll() {
		if ce := t.opts.Logger.Check(zapcore.WarnLevel, "answering request in flight: server gone"); ce != nil {
			t.write(ce, zap.Stringer("id", c.id), zap.String("method", c.method))
		}
		t.replied(c.id, why)
		replies = append(replies, Reply{c, LossReply(c.id, lost, why)})
		c.Span().Answered(nil, CodeServerGone, why)
		t.ended(c)
	}
	return replies
}

// Reply is an answer of the proxy's own to the issuer of a request, in
// the server's place.
type Reply struct {
	To    *Call
	Frame []byte
}

// ErrorReply builds the proxy's own error response, and counts it.
func (t *Tracker) ErrorReply(id framing.ID, code int, msg string) []byte {
	t.replied(id, msg)
	return ErrorReply(id, code, msg)
}

// replied counts an error response of the proxy's own to id, and reports it.
func (t *Tracker) replied(id framing.ID, msg string) {
	t.count(cProxyErrors, 1)
	t.emit(Peer(2), ActReplied, framing.KindResponse, "", id, msg)
}

// ErrorReply builds an error response of the proxy's own: its data names
// the proxy, so that no one mistakes it for the server's.
func ErrorReply(id framing.ID, code int, msg string) []byte {
	return framing.AppendErrorResponse(nil, id, framing.ErrorObject{Code: code, Message: msg,
		Data: map[string]string{"proxy": proxyName}})
}

// IsServerGone reports whether m is the proxy's own -32000 (ErrorReply
// with CodeServerGone): what a transport gives a request whose answer can
// no longer come (the upstream's stream broke), in the server's place.
func IsServerGone(m *framing.Message) bool {
	if m == nil || m.Kind != framing.KindResponse || !m.IsError {
		return false
	}
	var r struct {
		Error struct {
			Code int `json:"code"`
			Data struct {
				Proxy string `json:"proxy"`
			} `json:"data"`
		} `json:"error"`
	}
	return json.Unmarshal(m.Raw, &r) == nil && r.Error.Code == CodeServerGone && r.Error.Data.Proxy == proxyName
}

// ErrorReplyKind is ErrorReply with data.kind saying what kind of error of
// the proxy's it is, for clients that act on it.
func ErrorReplyKind(id framing.ID, code int, msg, kind string) []byte {
	return framing.AppendErrorResponse(nil, id, framing.ErrorObject{Code: code, Message: msg,
		Data: map[string]string{"proxy": proxyName, "kind": kind}})
}

// forwarded counts a message passed on; method and id are the message's, or
// for a response those of the request it answers.
func (t *Tracker) forwarded(from Peer, k framing.Kind, method string, id framing.ID) {
	t.count(cForwarded, 1)
	if t.opts.Observer != nil {
		t.opts.Observer.Observe(ActForwarded, from)
	}
	if t.opts.OnEvent != nil {
		t.emit(from, ActForwarded, k, method, id, "")
	}
}

// silenced accounts for a message about a request whose issuer must hear
// nothing more of it (Silence), which is not passed on: counted, in the
// events, and logged at debug with its size only (a server may send
// thousands).
func (t *Tracker) silenced(from Peer, dir Direction, m *framing.Message, id framing.ID, why string) {
	t.count(cSilenced, 1)
	if t.opts.Observer != nil {
		t.opts.Observer.Observe(ActSilenced, from)
	}
	if ce := t.opts.Logger.Check(zapcore.DebugLevel, string(ActSilenced)); ce != nil {
		t.write(ce, ActSilenced.feed(), t.peers[from].from, zap.String("direction", travel(from, dir).String()),
			zap.String("kind", m.Kind.String()), zap.String("method", m.Method), zap.Stringer("id", id),
			zap.Int("bytes", len(m.Raw)), zap.String("reason", why))
	}
	t.emit(from, ActSilenced, m.Kind, m.Method, id, why)
}

func (t *Tracker) dropped(from Peer, dir Direction, m *framing.Message, id framing.ID, why string, lvl zapcore.Level) {
	t.count(cDropped, 1)
	t.note(from, dir, ActDropped, m.Kind, m.Method, id, why, lvl)
}

// note logs a decision at lvl and reports it as an Event. dir is the
// direction of the request the message concerns.
func (t *Tracker) note(from Peer, dir Direction, a Action, k framing.Kind, method string, id framing.ID, why string, lvl zapcore.Level) {
	if t.opts.Observer != nil {
		t.opts.Observer.Observe(a, from)
	}
	if ce := t.opts.Logger.Check(lvl, string(a)); ce != nil {
		t.write(ce, a.feed(), t.peers[from].from, zap.String("direction", travel(from, dir).String()), zap.String("kind", k.String()),
			zap.String("method", method), zap.Stringer("id", id), zap.String("reason", why))
	}
	t.emit(from, a, k, method, id, why)
}

// noteCancel is note for an accepted cancel: its line names the tool and,
// for a cancel the proxy made on the client's behalf (a deadline, a
// disconnect, the session's end, shutdown), the source, from the proxy.
func (t *Tracker) noteCancel(from Peer, dir Direction, k framing.Kind, c *call, source Source, why string) {
	if t.opts.Observer != nil {
		t.opts.Observer.Observe(ActCancelAccepted, from)
	}
	if ce := t.opts.Logger.Check(zapcore.InfoLevel, string(ActCancelAccepted)); ce != nil {
		who := t.peers[from].from
		if source != SourceClient {
			who = zap.String("from", "proxy")
		}
		fields := []zap.Field{ActCancelAccepted.feed(), who, zap.String("direction", dir.String()), zap.String("kind", k.String()),
			zap.String("method", c.method), zap.Stringer("id", c.id), zap.String("reason", why)}
		if c.tool != "" {
			fields = append(fields, zap.String("tool", c.tool))
		}
		if from == Client {
			fields = append(fields, zap.String("source", string(source)))
		}
		t.write(ce, fields...)
	}
	if from == Client && source != SourceClient {
		from = Peer(2) // the proxy's own cancel, on the client's behalf: no message of a peer's
	}
	t.emit(from, ActCancelAccepted, k, c.method, c.id, why)
}

// travel is the direction a message from a peer goes in: a response or
// progress from the server to the client, whatever direction its request
// went; for the proxy's own messages, the request's (dir).
func travel(from Peer, dir Direction) Direction {
	switch from {
	case Client:
		return ClientToServer
	case Server:
		return ServerToClient
	}
	return dir
}

// emit reports an Event; a from beyond Server means the proxy itself.
func (t *Tracker) emit(from Peer, a Action, k framing.Kind, method string, id framing.ID, note string) {
	if t.opts.OnEvent == nil {
		return
	}
	who := "proxy"
	if from <= Server {
		who = from.String()
	}
	t.opts.OnEvent(Event{Time: t.opts.Now(), From: who, Action: a, Kind: k, Method: method, ID: id, Note: note})
}

// payload logs the start of a message the proxy refused, at debug level,
// when the configuration asks for payloads in logs.
func (t *Tracker) payload(from Peer, raw []byte) {
	if t.opts.LogPayloads {
		t.log(from, zapcore.DebugLevel, "the refused message begins", zap.ByteString("head", raw[:min(len(raw), 200)]))
	}
}

// Fail ends a client's request that the proxy cannot deliver or whose answer
// it cannot get (the upstream is unreachable, or failed), and returns the
// error response for the client; nil if the request was no longer in flight.
func (t *Tracker) Fail(c *Call, code int, msg string) []byte {
	if !t.fail(c, code, msg) {
		return nil
	}
	return t.ErrorReply(c.id, code, msg)
}

// fail ends c, a client's request the proxy answers itself with code and
// msg, and reports whether it was still in flight.
func (t *Tracker) fail(c *Call, code int, msg string) bool {
	if _, v := t.peers[Server].answers.complete(c.upID, nil); v != Forward {
		return false
	}
	c.Span().Answered(nil, code, msg)
	t.ended(c)
	return true
}

// ended tells the governor of a call that ended without the server's answer.
func (t *Tracker) ended(c *Call) {
	if g := t.opts.Governor; g != nil {
		g.Observe(Change{Kind: ChangeAnswered, Call: c})
	}
}

// Abandon forgets a client's request whose answer can no longer come (the
// upstream answered its POST with an HTTP error, or with JSON that did not
// answer it), so that it does not stay in flight for ever. The client got
// the upstream's answer, whatever it was; nothing is sent.
func (t *Tracker) Abandon(c *Call) {
	if _, v := t.peers[Server].answers.complete(c.upID, nil); v == Forward {
		c.Span().End("abandoned: the upstream's answer did not answer it", true)
		t.ended(c)
	}
}

// Cancellation is a request the proxy cancelled on the client's behalf, with
// the notification that tells the server.
type Cancellation struct {
	Call   *Call
	Notice []byte
}

// CancelInFlight cancels every request of the client still in flight, as if
// the client had cancelled each, and returns them with the cancel
// notifications to send the server (the session is ending: MCP-NOTES §6b
// DELETE, or the wrapper is shutting down).
func (t *Tracker) CancelInFlight(source Source, reason string) []Cancellation {
	var cs []Cancellation
	for _, c := range t.peers[Client].issued.cancelAll() {
		cs = append(cs, Cancellation{c, t.cancelled(c, source, reason)})
	}
	return cs
}

// ForgetServerRequests forgets every request of the server still in flight
// (its server was replaced: their answers can no longer reach it).
func (t *Tracker) ForgetServerRequests() { t.peers[Server].issued.failAll() }

// cancelled accounts for a call the proxy cancelled on the client's behalf
// and returns the cancel notification for the server.
func (t *Tracker) cancelled(c *Call, source Source, reason string) []byte {
	t.count(cCancelsForwarded, 1)
	if t.opts.OnCancel != nil {
		t.opts.OnCancel(source)
	}
	t.cancelTraced(Client, c, source, reason)
	if g := t.opts.Governor; g != nil {
		g.Observe(Change{Kind: ChangeCancelled, Call: c, Source: source, Reason: reason})
	}
	t.noteCancel(Client, ClientToServer, framing.KindNotification, c, source, reason) // after Observe, as above
	return framing.AppendCancelled(nil, c.upID, reason)
}

// cancelShared cancels the other requests in flight under a cancelled
// request's id, as the client's cancel asks (it names each of them), and
// returns them with their notifications.
func (t *Tracker) cancelShared(id framing.ID, reason string) []Cancellation {
	more := t.peers[Client].issued.cancelShared(id)
	if len(more) == 0 {
		return nil
	}
	t.log(Client, zapcore.WarnLevel, "ambiguous cancel: requests in flight share its id; each is cancelled",
		zap.Stringer("id", id), zap.Int("requests", len(more)+1))
	cs := make([]Cancellation, 0, len(more))
	for _, c := range more {
		cs = append(cs, Cancellation{c, t.cancelled(c, SourceClient, reason)})
	}
	return cs
}

// CancelCall cancels one request of the client on the client's behalf (it
// went away and, by the configuration, that counts as a cancel), if the
// request is still in flight, and returns the cancel notification to send
// the server; nil if the request is no longer in flight.
func (t *Tracker) CancelCall(c *Call, source Source, reason string) []byte {
	if !t.peers[Client].issued.cancelExact(c) {
		return nil
	}
	return t.cancelled(c, source, reason)
}

// ID returns the request's id as its issuer sent it.
func (c *Call) ID() framing.ID { return c.id }

// Method returns the request's method.
func (c *Call) Method() string { return c.method }

// Tool returns a tools/call's tool, interned (framing.LastName): the
// ledger reads it once per call, for every reader after it; "" for
// another method.
func (c *Call) Tool() string { return c.tool }

// cancelTraced records an accepted cancel on the call's span. A request
// of the server's ends its span here; a client's ends with its policy
// story (its audit line), which a governor follows, or here without one.
func (t *Tracker) cancelTraced(from Peer, c *Call, source Source, reason string) {
	if c.span == nil {
		return
	}
	switch source {
	case SourceDeadline:
		c.span.Event(EventDeadline)
	case SourceClientTimeout:
		c.span.Event(EventClientTimeout)
	}
	c.span.Event(EventCancelAccepted, String(AttrSource, string(source)), String(AttrReason, reason))
	if from == Server || t.opts.Governor == nil {
		c.span.End("cancelled by the "+from.String(), false)
	}
}

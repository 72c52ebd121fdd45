package httpx

import (
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unique"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/owned"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/sessiontable"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/stream"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// session is one Mcp-Session-Id's state, or one request's when there is no
// session.
type session struct {
	// scope names the session in logs, which never show session ids (a
	// session id can be as good as a credential).
	scope string
	idMu  sync.Mutex // guards id, which adopt sets once
	id    string
	key   string // names the session to a fleet; set by adopt
	// core decides the session's messages; its lock is held while a
	// POST's messages are decided and their streams attached, and by the
	// governor's actions. Its governor, if any, applies the policy.
	core *proxy.Session
	t    *proxy.Tracker // core's
	// principal is a digest of the credential of a request without a
	// session, which is several clients' (proxy.SessionOptions.Principal);
	// set before its messages are decided.
	principal string
	// peer is the client that opened the session (proxy.SessionOptions.Peer,
	// named by peerName when asked).
	peer    netip.Addr
	sc      *Sidecar // for the session's carrier (see policy.go)
	govOnce sync.Once
	// notifying owns the goroutines that tell the upstream of the
	// session's cancels.
	notifying owned.Group

	mu sync.Mutex // guards streams and version
	// streams maps each client request still in flight to the response
	// stream that will carry its answer.
	streams streamSet
	// deferred maps each request whose cancel the governor keeps back
	// (reissue: join) to the stream still reading its answer.
	deferred map[*proxy.Call]*relayed
	// own maps each request of the proxy's own still running to its POST,
	// which its cancel waits for.
	own map[*proxy.Call]*ownPost
	// lingers: the session outlasts its request, a request without a
	// session, for the tasks its governor hosts (requestDone).
	lingers atomic.Bool
	// version is the MCP-Protocol-Version the client last sent.
	version            string
	sessiontable.Usage // when the session last saw a request
	// lastResume is when the client last resumed a stream, in UnixNano.
	lastResume atomic.Int64
	// open counts the session's response streams being relayed (GET
	// streams included).
	open atomic.Int32

	// What follows serves the reuse of a request's own session
	// (requestSessions): a spent one serves the next request without a
	// session, renewed (init), which keeps core, principalFn and lingerFn.

	// principalFn is core's SessionOptions.Principal, and lingerFn what
	// the governor calls when the tasks the session outlasts its request
	// for are over (requestDone): made once, each reads the session as it
	// now is.
	principalFn func(*proxy.Call) (string, bool)
	peerFn      func(*proxy.Call) string
	lingerFn    func()
	// late says that something may still read the session after its
	// request is done (a late answer's reader): it is never reused.
	late atomic.Bool
	// govDone says that the governor ended with nothing left to do
	// (closeGovernor): it acts on the session no more.
	govDone atomic.Bool
	// readers counts the readers of requestSessions.all still holding the
	// session, and ended says that its request is done; both guarded by
	// requestSessions.mu.
	readers int
	ended   bool
}

// newSession returns a session with id ("" for a request without one), a
// spent one renewed where there is one for a governed request without a
// session (a POST's).
func newSession(id string, s *Sidecar, governed bool, peer netip.Addr) *session {
	var sess *session
	if id == "" && governed {
		sess = s.own.spare()
	}
	if sess == nil {
		sess = new(session)
	}
	sess.init(id, s, governed, peer)
	return sess
}

// init makes sess a new session with id, peer's, over what it was: only
// its core (renewed in place), principalFn, peerFn and lingerFn are kept.
func (sess *session) init(id string, s *Sidecar, governed bool, peer netip.Addr) {
	var scope [24]byte
	core, principal, peerFn, linger := sess.core, sess.principalFn, sess.peerFn, sess.lingerFn
	*sess = session{id: id, scope: string(strconv.AppendInt(append(scope[:0], 's'), scopes.Add(1), 10)), sc: s,
		principalFn: principal, peerFn: peerFn, lingerFn: linger, peer: peer}
	if sess.peerFn == nil {
		sess.peerFn = func(*proxy.Call) string { return peerName(sess.peer) }
	}
	opts := s.Tracker
	opts.Logger, opts.Scope = s.log, zap.String("session", sess.scope) // added only to lines written
	// Each request's answer comes on its own response stream: requests
	// that share an id (claude.ai sends every one with id 1) are kept apart,
	// renamed toward the upstream.
	opts.AllowSharedIDs = true
	opts.Totals = &s.totals
	// Every accepted cancel is counted by the tracker that accepts it.
	if opts.OnCancel == nil && s.OnCancel != nil {
		opts.OnCancel = s.cancelled
	}
	so := proxy.SessionOptions{Carrier: sess, Peer: sess.peerFn}
	if id == "" {
		if sess.principalFn == nil {
			sess.principalFn = func(*proxy.Call) (string, bool) { return sess.principal, sess.sessionID() == "" }
		}
		so.Principal = sess.principalFn
	}
	if s.Governor != nil && governed {
		so.Governor = s.Governor(sess.scope)
	}
	if s.NewTracer != nil {
		opts.Tracer = s.NewTracer()
	}
	so.Tracker = opts
	if core != nil {
		core.Renew(so)
		sess.core = core
	} else {
		sess.core = proxy.NewSession(so)
	}
	sess.t = sess.core.Tracker()
	sess.ownsSession()
}

// spent reports whether nothing refers to the session but its request,
// which is done, and nothing more can come of it: it had no session id,
// it hosts no task, its governor ended with nothing left to do, no stream
// of it is open or known, no request of the proxy's own or cancel's
// notice of it is running, nothing reads a late answer of it, and its
// core is Spent (no cancel, nothing in flight). Such a session may serve
// the next request without a session.
func (sess *session) spent() bool {
	if sess.sessionID() != "" || sess.lingers.Load() || sess.late.Load() || sess.open.Load() != 0 ||
		sess.core.Governor() != nil && !sess.govDone.Load() || !sess.notifying.Idle() {
		return false
	}
	sess.mu.Lock()
	busy := sess.streams.c != nil || len(sess.streams.more) > 0 || len(sess.deferred) > 0 || len(sess.own) > 0
	sess.mu.Unlock()
	return !busy && sess.core.Spent()
}

// ownsSession lets the governor keep a client's cancel back (reissue:
// join) once the session has an id: it is then one client's, as a stdio
// client's pipe is, and its cancels are notifications the relay sends
// when told. A request without a session, of protocol 2026-07-28, has it
// too: the cancel is the close of its stream, which the relay carries out
// (closing the upstream's) when told, and a re-issue joins only a call of
// the same credential (principal).
func (sess *session) ownsSession() {
	byClose := sess.protocolVersion().CancelsByClose()
	if sess.sessionID() == "" {
		sess.core.SetDeferCancels(byClose)
		return
	}
	sess.core.SetDeferCancels(!byClose)
}

// principalOf is a digest of a request's credential (its Authorization
// header), "" when it has none.
func principalOf(req *fasthttp.Request) string {
	auth := req.Header.Peek(fasthttp.HeaderAuthorization)
	if len(auth) == 0 {
		return ""
	}
	sum := sha256.Sum256(auth)
	return hex.EncodeToString(sum[:])
}

// scopes numbers the sessions for logs.
var scopes atomic.Int64

// DefaultSessionIdle is how long a session may go without a request, and
// with nothing in flight and no stream open, before the sidecar forgets it
// (a client that never sends DELETE), when Sidecar.SessionIdle is zero.
const DefaultSessionIdle = 30 * time.Minute

// DefaultMaxSessions caps the sessions of each kind that run a server of
// their own, when Sidecar.MaxSessions is zero.
const DefaultMaxSessions = 64

// DefaultMaxRelayedSessions caps the upstream sessions the sidecar relays,
// when Sidecar.MaxRelayedSessions is zero: high, so that no working
// deployment meets it, and yet a bound on what one client can open.
const DefaultMaxRelayedSessions = 10_000

// relayedFullRetry is the Retry-After of an initialize refused at the cap.
const relayedFullRetry = "5"

// busy reports whether the session has a request in flight or a stream
// open: a cancel may still come for it.
func (sess *session) Busy() bool {
	inFlight, _ := sess.t.InFlight()
	return inFlight > 0 || sess.open.Load() > 0
}

// retire ends the governance of a session the sidecar forgot; the
// upstream keeps it (a client may still DELETE it there).
func (sess *session) Retire(string) { sess.closeGovernor() }

func (sess *session) Stats() proxy.Stats { return sess.t.Stats() }

func (sess *session) InFlight() int {
	n, _ := sess.t.InFlight()
	return n
}

// attach notes that the answer to c will come on st.
func (sess *session) attach(c *proxy.Call, st *relayed) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	sess.streams.set(c, st)
}

// detach forgets the streams of calls that are answered or gone.
func (sess *session) detach(st *relayed) {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	for c, s := range sess.streams.all() {
		if s == st {
			sess.streams.del(c)
		}
	}
}

// cancelled ends, after grace, the stream that would have carried c's
// answer, if that stream carries nothing else the client still waits for,
// and returns how far c's POST has gone (nil: no stream of c's is known).
func (sess *session) cancelled(c *proxy.Call, grace time.Duration) *upstream.Posting {
	sess.mu.Lock()
	st := sess.streams.get(c)
	sess.streams.del(c)
	waiting := false
	for _, s := range sess.streams.all() {
		waiting = waiting || s == st
	}
	sess.mu.Unlock()
	if st == nil {
		return nil
	}
	if !waiting {
		st.EndAfter(grace)
	}
	return st.post()
}

// deferCancel ends, after grace, the client's side of the stream that
// would have carried c's answer, as cancelled does, for a cancel the
// governor keeps back: the stream is kept (its upstream side read on)
// until the governor sends the cancel (Cancel, takeDeferred).
func (sess *session) deferCancel(c *proxy.Call, grace time.Duration) {
	sess.mu.Lock()
	for dc, st := range sess.deferred { // answered since: nothing to send
		if st.Ended() {
			delete(sess.deferred, dc)
		}
	}
	if st := sess.streams.get(c); st != nil {
		if sess.deferred == nil {
			sess.deferred = map[*proxy.Call]*relayed{}
		}
		sess.deferred[c] = st
	}
	sess.mu.Unlock()
	sess.cancelled(c, grace)
}

// keeps reports whether st is read on for a call whose cancel the
// governor keeps back.
func (sess *session) keeps(st *relayed) bool {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	for _, kept := range sess.deferred {
		if kept == st {
			return true
		}
	}
	return false
}

// takeDeferred returns the stream of c whose cancel the governor kept
// back, and forgets it; nil if there is none.
func (sess *session) takeDeferred(c *proxy.Call) *relayed {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	st := sess.deferred[c]
	delete(sess.deferred, c)
	return st
}

// postingOf returns how far the POST of c has gone, if its stream is
// known.
func (sess *session) postingOf(c *proxy.Call) *upstream.Posting {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if st := sess.streams.get(c); st != nil {
		return st.post()
	}
	return nil
}

// sessionID returns the session's id; empty for a request without one.
func (sess *session) sessionID() string {
	sess.idMu.Lock()
	defer sess.idMu.Unlock()
	return sess.id
}

// callsOn returns the client requests whose answers st was to carry.
func (sess *session) callsOn(st *relayed) []*proxy.Call {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	var calls []*proxy.Call
	for c, s := range sess.streams.all() {
		if s == st {
			calls = append(calls, c)
		}
	}
	return calls
}

// awaitsOn reports whether the client still waits for an answer st was
// to carry.
func (sess *session) awaitsOn(st *relayed) bool {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	for c, s := range sess.streams.all() {
		if s == st && sess.t.Awaited(c) {
			return true
		}
	}
	return false
}

// resumed notes that the client resumed a stream (a GET with
// Last-Event-ID): dropped connections before now were not abandonment.
func (sess *session) resumed(now time.Time) { sess.lastResume.Store(now.UnixNano()) }

// finishCall ends the stream that was to carry c's answer with msg, the
// proxy's own last message for c.
func (sess *session) finishCall(c *proxy.Call, msg []byte) {
	sess.mu.Lock()
	st := sess.streams.get(c)
	sess.streams.del(c)
	sess.mu.Unlock()
	if st != nil {
		st.Finish(msg)
	}
}

// endAll ends every stream of the session.
func (sess *session) endAll() {
	sess.mu.Lock()
	var streams []*relayed
	for c, st := range sess.streams.all() {
		streams = append(streams, st)
		sess.streams.del(c)
	}
	sess.mu.Unlock()
	for _, st := range streams { // outside the lock: ending waits for a read in progress
		st.CloseWithError(stream.ErrCancelled)
	}
	sess.endOwn()
}

// setVersion notes the protocol version the client speaks in this session.
func (sess *session) setVersion(v []byte) {
	if len(v) == 0 {
		return
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	if sess.version != string(v) {
		// Interned: the revisions are few, and a request costs no copy.
		sess.version = unique.Make(string(v)).Value()
	}
}

// protocolVersion returns the revision the client named in its headers, if
// it named one.
func (sess *session) protocolVersion() framing.Revision {
	sess.mu.Lock()
	defer sess.mu.Unlock()
	return framing.Revision(sess.version)
}

// requestSessions are the sessions that are one request's own (it named no
// session, or one the upstream did not take), while the request runs: no
// table holds them, yet a shutdown must cancel their requests too. It
// keeps the spent ones (session.spent) for the next requests without a
// session, so that a request does not make a session's objects anew: a
// session goes back once its request is done (done) and no reader of all
// holds it (release).
type requestSessions struct {
	mu     sync.Mutex
	m      map[*session]struct{}
	spares sync.Pool // of spent *session
	// onDone, if set (by tests), is told of each session whose request is
	// done and whose last reader let go, and whether it was kept.
	onDone func(kept bool)
}

func (r *requestSessions) add(sess *session) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = make(map[*session]struct{})
	}
	r.m[sess] = struct{}{}
}

// done forgets sess, whose request is done; it is kept for another once
// no reader holds it, if it is spent. A second call does nothing: a
// session kept twice would serve two requests at once.
func (r *requestSessions) done(sess *session) {
	r.mu.Lock()
	delete(r.m, sess)
	free := !sess.ended && sess.readers == 0
	sess.ended = true
	r.mu.Unlock()
	if free {
		r.keep(sess)
	}
}

// keep keeps sess for another request if it is spent.
func (r *requestSessions) keep(sess *session) {
	kept := sess.spent()
	if kept {
		r.spares.Put(sess)
	}
	if r.onDone != nil {
		r.onDone(kept)
	}
}

// spare returns a spent session to renew, or nil.
func (r *requestSessions) spare() *session {
	sess, _ := r.spares.Get().(*session)
	return sess
}

// all returns the sessions whose request still runs, each held until
// release: none is reused meanwhile.
func (r *requestSessions) all() []*session {
	r.mu.Lock()
	defer r.mu.Unlock()
	all := make([]*session, 0, len(r.m))
	for sess := range r.m {
		sess.readers++
		all = append(all, sess)
	}
	return all
}

// release lets go of the sessions all returned.
func (r *requestSessions) release(all []*session) {
	var free []*session
	r.mu.Lock()
	for _, sess := range all {
		if sess.readers--; sess.readers == 0 && sess.ended {
			free = append(free, sess)
		}
	}
	r.mu.Unlock()
	for _, sess := range free {
		r.keep(sess)
	}
}

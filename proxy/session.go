package proxy

import (
	"bytes"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// Session is one client session's decisions, whatever carries its frames:
// its Tracker, its Governor, the requests the governor holds, and the lock
// under which a client's message is decided and acted on. A transport hands
// every message to Decide and carries out the Outcome; what the session
// decides with no message in hand (a deadline, a held request's dispatch,
// the proxy's own request, the end of every call) it has the transport's
// Carrier do. Session is the one implementation of Actions.
type Session struct {
	// mu is held while a client's message is decided and its outcome
	// carried out, by the Actions, and by CancelAll, so that each sees the
	// held requests (and the transport's queue) as the last one left them.
	mu      sync.Mutex
	t       Tracker // in place: an HTTP front makes a session per request without one
	gov     Governor
	carrier Carrier
	restart func(reason string) bool
	held    map[*Call]any // the requests the governor holds, with what the transport keeps of each; mu
	// deferred are the client's cancels the governor sends when it says
	// (Admission.DeferCancel), by call, each the notice for the server; mu.
	deferred     map[*Call][]byte
	deferCancels atomic.Bool
	principal    func(*Call) (string, bool)
	peer         func(*Call) string
	ownerID      int64 // numbers the session as a principal (Owner)
}

// sessionIDs numbers sessions for Owner.
var sessionIDs atomic.Int64

// Carrier carries out, on one transport, what a Session decides with no
// message in hand. Its methods are called with the session's lock held,
// from the governor's goroutine or the transport's own, and must not block
// (a transport that must wait, for an HTTP answer say, waits on a
// goroutine it owns).
type Carrier interface {
	// Dispatch sends the server a request the governor held until now;
	// held is what the transport gave Hold.
	Dispatch(c *Call, held any)
	// Withdrawn drops a held request that was cancelled before it was
	// sent; neither it nor its cancel ever reaches the server. reply, if
	// not nil, is the client's answer to it.
	Withdrawn(c *Call, held any, reply []byte)
	// Cancel sends the server notice, the cancel of c, a request it has
	// (or is about to have), and the client reply, if not nil.
	Cancel(c *Call, notice, reply []byte)
	// SendOwn sends the server frame, c, a request of the proxy's own.
	SendOwn(c *Call, frame []byte)
	// CancelOwn sends the server notice, the cancel of c, a request of the
	// proxy's own it has (or is about to have: never before c itself).
	CancelOwn(c *Call, notice []byte)
	// Notify sends c's issuer frame, a notification about c, where it can
	// reach the issuer; held, when c is held, is what the transport gave
	// Hold (an HTTP front's held request has no stream until it opens one).
	Notify(c *Call, held any, frame []byte)
}

// SessionOptions configures a Session.
type SessionOptions struct {
	// Tracker configures the session's Tracker; its Governor is the one
	// Governor makes.
	Tracker TrackerOptions
	// Governor, if set, makes the session's Governor, which acts through
	// the Session.
	Governor func(Actions) Governor
	// Carrier carries out what the session decides. Required.
	Carrier Carrier
	// Restart, if set, is what Actions.Restart does (the stdio wrapper's
	// escalation); without it, Restart reports false.
	Restart func(reason string) bool
	// DeferCancels lets the governor defer a client's cancel
	// (Admission.DeferCancel): the session keeps it from the server until
	// the governor releases it. Only a transport whose session is one
	// client's, and that keeps reading a cancelled call's answer, sets it;
	// without it cancels go at once, and no re-issue joins a call.
	DeferCancels bool
	// Principal, if set, is Actions.Principal: it says whether the
	// session is several clients' (requests without a session, each its
	// own session or all on one; an HTTP front's session is, until the
	// upstream gives it an id), and then the digest of the credential
	// c's request carried. Nil: the session is one client's.
	Principal func(c *Call) (string, bool)
	// Peer, if set, says which client sent c (its address, or behind a
	// trusted proxy its client's), where the process serves several
	// clients: Owner. Nil: the process's one client (the wrapper, the
	// bridge).
	Peer func(c *Call) string
}

// NewSession returns a Session configured by o.
func NewSession(o SessionOptions) *Session {
	s := new(Session)
	s.init(o)
	return s
}

// Renew makes s, in place, what NewSession(o) makes: nothing of what s
// was is kept. It is for a transport that makes a session for one request
// and keeps the spent ones for the next (an HTTP front's requests without
// a session); the transport must know that nothing refers to s any more:
// that s is Spent, its governor closed with nothing left to do, and every
// reader of its own done with it.
func (s *Session) Renew(o SessionOptions) {
	*s = Session{}
	s.init(o)
}

func (s *Session) init(o SessionOptions) {
	s.carrier, s.restart, s.principal, s.peer = o.Carrier, o.Restart, o.Principal, o.Peer
	s.ownerID = sessionIDs.Add(1)
	s.deferCancels.Store(o.DeferCancels)
	if o.Governor != nil {
		s.gov = o.Governor(s)
	}
	o.Tracker.Governor = s.gov
	s.t.init(o.Tracker)
}

// Spent reports whether the session has nothing left to do and nothing
// more can come of it: no request in flight either way, none held, no
// cancel kept back, and nothing counted but messages passed on (no cancel
// seen, nothing suppressed, dropped or withdrawn, no error of the
// proxy's), so that no late answer or progress can be owed to it and no
// cancel's work is still running. Only such a session may be Renewed.
func (s *Session) Spent() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.held) > 0 || len(s.deferred) > 0 {
		return false
	}
	if a, b := s.t.InFlight(); a > 0 || b > 0 {
		return false
	}
	st := s.t.Stats()
	st.Forwarded = 0
	return st == Stats{}
}

// Tracker returns the session's Tracker, for what is not a decision
// (counters, error replies, the proxy's own cancels of a departed client).
func (s *Session) Tracker() *Tracker { return &s.t }

// Governor returns the session's Governor, nil without a policy; the
// transport closes it when the session ends.
func (s *Session) Governor() Governor { return s.gov }

// Lock takes the session's lock: a client's message is decided, and its
// outcome carried out, with it held.
func (s *Session) Lock() { s.mu.Lock() }

// Unlock releases the session's lock.
func (s *Session) Unlock() { s.mu.Unlock() }

// Decide decides one valid message from a peer; parent is the trace
// context of the transport's own that brought it (an HTTP request's
// headers), if any. A client's message is decided with the lock held,
// and, when the outcome says Hold, the request is held with Hold before
// the lock is released. A client's cancel of a held request withdraws it
// here (the Carrier's Withdrawn is told; Outcome.Withdrawn says so, and the
// cancel is dropped), as do those of Outcome.More, which then holds only
// the ones the server must be told of.
func (s *Session) Decide(from Peer, m *framing.Message, parent TraceContext) Outcome {
	return s.decide(from, m, parent, nil)
}

// DecideThen is Decide for a transport that sends a client's accepted
// cancel on itself, at once: then, which it runs after the cancel is on
// its way (the lock still held), tells the governor of the cancel and
// says the event (cancel_accepted), which Decide does before it returns.
// Both wake other threads (a timer armed, a worker, the feed's writer):
// on the 2-core machine, done before the cancel was written, they and the
// feed's write to the disk made it take 2.0x a plain notification's time
// through the wrapper, 1.2x once they came after (bench/cancel). A cancel
// that withdraws a held request, that the governor keeps back, or that
// ends other requests too, has them done first, as Decide does: then is
// a no-op.
func (s *Session) DecideThen(from Peer, m *framing.Message, parent TraceContext) (o Outcome, then func()) {
	var later func()
	o = s.decide(from, m, parent, &later)
	if later == nil {
		return o, func() {}
	}
	return o, later
}

func (s *Session) decide(from Peer, m *framing.Message, parent TraceContext, later *func()) Outcome {
	o := s.t.decideIn(from, m, parent, later)
	if from != Client || o.Cancelled == nil {
		return o
	}
	if later != nil && *later != nil && s.governorFirst(o) {
		(*later)()
		*later = nil
	}
	if s.withdrawLocked(o.Cancelled) {
		o.Withdrawn, o.Verdict = true, Drop
	} else if o.Cancelled.deferCancel && s.deferCancels.Load() {
		// The governor sends it, or not (a re-issue may join the call).
		notice := o.Rewritten
		if notice == nil {
			notice = m.Raw
		}
		s.deferLocked(o.Cancelled, bytes.Clone(notice)) // m.Raw is the relay's buffer
		o.Deferred, o.Verdict = true, Drop
	}
	if len(o.More) > 0 {
		more := o.More[:0]
		for _, mc := range o.More {
			if !s.withdrawLocked(mc.Call) {
				more = append(more, mc)
			}
		}
		o.More = more
	}
	return o
}

// governorFirst reports whether the governor must hear of a cancel, whose
// outcome is o, before the transport acts on it: it withdraws a held
// request, the governor keeps it back, or it ends other requests too.
func (s *Session) governorFirst(o Outcome) bool {
	_, held := s.held[o.Cancelled]
	return held || o.Cancelled.deferCancel && s.deferCancels.Load() || len(o.More) > 0
}

// deferLocked keeps notice, the client's cancel of c, for the governor to
// send (ReleaseCancel).
func (s *Session) deferLocked(c *Call, notice []byte) {
	if s.deferred == nil {
		s.deferred = map[*Call][]byte{}
	}
	s.deferred[c] = notice
}

// withdrawLocked withdraws c if it is held, telling the Carrier, and
// reports whether it was.
func (s *Session) withdrawLocked(c *Call) bool {
	held, ok := s.WithdrawHeld(c)
	if ok {
		s.carrier.Withdrawn(c, held, nil)
	}
	return ok
}

// Hold keeps a request the governor asked to hold (Outcome.Hold) until
// it is dispatched or withdrawn; held is what the transport will need to
// send it. The lock is held.
func (s *Session) Hold(c *Call, held any) {
	if s.held == nil {
		s.held = map[*Call]any{}
	}
	s.held[c] = held
}

// WithdrawHeld withdraws c if it is held, and returns what the transport
// gave Hold: the request was cancelled before it was sent, and neither it
// nor its cancel will be. The lock is held.
func (s *Session) WithdrawHeld(c *Call) (held any, ok bool) {
	held, ok = s.held[c]
	if ok {
		delete(s.held, c)
		s.t.Withdraw(Client, c)
	}
	return held, ok
}

// Expire implements Actions: the call is cancelled on the server as a
// client's cancel would be (withdrawn if still held), and the client gets
// reply.
func (s *Session) Expire(c *Call, source Source, reason string, reply []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cancelLocked(c, s.t.CancelCall(c, source, reason), reply)
}

// cancelLocked carries out the cancel of c, whose notice the tracker
// made: nil when c was no longer in flight, and nothing is done.
func (s *Session) cancelLocked(c *Call, notice, reply []byte) {
	if notice == nil {
		return // answered or cancelled meanwhile
	}
	if held, ok := s.WithdrawHeld(c); ok {
		s.carrier.Withdrawn(c, held, reply)
		return
	}
	s.carrier.Cancel(c, notice, reply)
}

// Waiter is what a Governor may also be: one that holds some requests
// only to answer them itself when something else happens (a tasks/result
// poll of a task the proxy hosts).
type Waiter interface {
	// Waits reports whether c is such a request. Called with the
	// session's lock held.
	Waits(c *Call) bool
}

// Left tells the session that the client left the stream that was to
// carry c's answer, where leaving is no cancel (protocol 2025): a request
// the governor holds only to answer itself (Waiter) is cancelled then,
// since nothing runs for it upstream and nobody would read its answer
// (20,000 polls dropped so held 170 MB until their tasks ended); any
// other request runs on. It reports whether c was cancelled.
func (s *Session) Left(c *Call) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	w, ok := s.gov.(Waiter)
	if _, held := s.held[c]; !held || !ok || !w.Waits(c) {
		return false
	}
	s.cancelLocked(c, s.t.CancelCall(c, SourceDisconnect, "client left the stream of its poll"), nil)
	return true
}

// Dispatch implements Actions: a held request is sent now, unless it was
// withdrawn meanwhile.
func (s *Session) Dispatch(c *Call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if held, ok := s.held[c]; ok {
		delete(s.held, c)
		s.carrier.Dispatch(c, held)
	}
}

// SendOwn implements Actions: the proxy's own request is registered with
// the tracker and sent; its answer goes to onAnswer.
func (s *Session) SendOwn(method string, params []byte, progress framing.ID, onAnswer func(*framing.Message)) *Call {
	c, frame := s.t.OwnCall(method, params, progress, onAnswer)
	s.carrier.SendOwn(c, frame)
	return c
}

// CancelOwn implements Actions: the cancel of the proxy's own request
// goes to the server, unless it was answered.
func (s *Session) CancelOwn(c *Call, source Source, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if notice := s.t.CancelOwn(c, source, reason); notice != nil {
		s.carrier.CancelOwn(c, notice)
	}
}

// Serve implements Actions: a held request the proxy serves itself is
// answered with reply and never sent.
func (s *Session) Serve(c *Call, reply []byte) bool { return s.answerHeld(c, reply, s.t.Served) }

// Restart implements Actions.
func (s *Session) Restart(reason string) bool { return s.restart != nil && s.restart(reason) }

// After implements Actions: f runs once the client's message being
// decided, if any, has been carried out.
func (s *Session) After(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

// CancelAll cancels every request of the client still in flight, on the
// server as a client's cancel would (so the governor runs their hooks and
// audits them as from source), held ones withdrawn; the client gets, for
// each, the reply reply makes of its id, when reply is not nil. It returns
// how many it cancelled: what a shutdown or the end of a session does.
func (s *Session) CancelAll(source Source, why string, reply func(framing.ID) []byte) int {
	n := s.cancelAll(source, why, reply)
	if g, ok := s.gov.(OwnWork); ok { // after the client's calls, off the lock: it cancels through the session
		g.CancelOwnWork(source, why)
	}
	return n
}

func (s *Session) cancelAll(source Source, why string, reply func(framing.ID) []byte) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs := s.t.CancelInFlight(source, why)
	for c, notice := range s.deferred { // the session ends: no re-issue can join them now
		delete(s.deferred, c)
		s.carrier.Cancel(c, notice, nil)
	}
	for _, c := range cs {
		var r []byte
		if reply != nil {
			r = reply(c.Call.ID())
		}
		s.cancelLocked(c.Call, c.Notice, r)
	}
	return len(cs)
}

// Cancel cancels c on the client's behalf, as from source for reason (the
// client went away, and by the configuration that counts as a cancel), if
// it is still in flight: withdrawn if held, else its cancel carried to the
// server; the client gets reply, if not nil. A client's stream that closed
// (source disconnect, no reply) cancels a call whose cancel the governor
// sends (Admission.DeferCancel) as the client's cancel would: the session
// keeps it (Deferred then reports true). It reports whether c was in
// flight.
func (s *Session) Cancel(c *Call, source Source, reason string, reply []byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	notice := s.t.CancelCall(c, source, reason)
	_, held := s.held[c]
	if notice != nil && source == SourceDisconnect && reply == nil && c.deferCancel && !held && s.deferCancels.Load() {
		s.deferLocked(c, notice)
		return true
	}
	s.cancelLocked(c, notice, reply)
	return notice != nil
}

// Deferred reports whether the session keeps c's cancel for the governor
// to send.
func (s *Session) Deferred(c *Call) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.deferred[c]
	return ok
}

// Answer implements Actions: a held request that joined a call already
// running is answered with reply and never sent.
func (s *Session) Answer(c *Call, reply []byte) bool { return s.answerHeld(c, reply, s.t.Joined) }

// answerHeld answers c, if still held, with reply in place of the server,
// settled as the tracker's settle says, and reports whether it was held.
func (s *Session) answerHeld(c *Call, reply []byte, settle func(*Call)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	held, ok := s.held[c]
	if !ok {
		return false // withdrawn meanwhile
	}
	delete(s.held, c)
	settle(c)
	s.carrier.Withdrawn(c, held, reply)
	return true
}

// Notify implements Actions.
func (s *Session) Notify(c *Call, frame []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.carrier.Notify(c, s.held[c], frame)
}

// ReleaseCancel implements Actions: the client's cancel of c that the
// session kept is sent now, or forgotten.
func (s *Session) ReleaseCancel(c *Call, send bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	notice, ok := s.deferred[c]
	if !ok {
		return
	}
	delete(s.deferred, c)
	if send {
		s.carrier.Cancel(c, notice, nil)
	}
}

// DefersCancels implements Actions.
func (s *Session) DefersCancels() bool { return s.deferCancels.Load() }

// Owner implements Actions.
func (s *Session) Owner(c *Call) (principal, peer string) {
	if s.peer == nil {
		return "", ""
	}
	peer = s.peer(c)
	p, several := s.Principal(c)
	switch {
	case !several:
		return "session " + strconv.FormatInt(s.ownerID, 10), peer
	case p == "":
		return "anonymous " + peer, peer // no credential: one principal per address
	}
	return "credential " + p, peer
}

// Principal implements Actions.
func (s *Session) Principal(c *Call) (string, bool) {
	if s.principal == nil {
		return "", false
	}
	return s.principal(c)
}

// SetDeferCancels turns SessionOptions.DeferCancels on or off for the
// requests admitted from now on: an HTTP front's session becomes one
// client's once the upstream gives it an id.
func (s *Session) SetDeferCancels(on bool) { s.deferCancels.Store(on) }

package proxy

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// Direction names who issued a request: the client (answered by the server)
// or the server (sampling, elicitation, roots, ping; answered by the client).
type Direction uint8

// The two directions.
const (
	ClientToServer Direction = iota
	ServerToClient
)

// String names the direction, as logs show it.
func (d Direction) String() string {
	if d == ClientToServer {
		return "client_to_server"
	}
	return "server_to_client"
}

// callState is a request's life: in flight, then answered or cancelled.
// A cancelled call stays in the ledger, retired, to absorb its late response.
type callState uint8

const (
	stateInFlight callState = iota
	stateAnswered
	stateCancelled
	// stateTask: answered with a CreateTaskResult (2025-11-25); its
	// progress token lives on until the task ends (see taskLocked).
	stateTask
)

// call is one forwarded request. Its fields are set when the call is created
// and never change, except state, retiredAt and listed, which the ledger's
// lock guards.
type call struct {
	id       framing.ID // the issuer's id
	upID     framing.ID // the id the receiver sees; differs from id only when aliased
	method   string
	tool     string     // params.name of a tools/call, for the logs ("" if escaped or unknown)
	token    framing.ID // the issuer's progress token, if any
	upToken  framing.ID // the token the receiver sees; differs only when aliased or own
	ownToken bool       // upToken is the proxy's own (see watch): the issuer sent none
	hasTask  bool
	// deferCancel: the client's cancel goes when the governor says
	// (Admission.DeferCancel).
	deferCancel bool
	// rewrite: the governor rewrites the server's answer (Admission.Rewrite).
	rewrite bool
	// listed: the call is the one in flight under its issuer's id (the
	// oldest, where several share it), found by liveAtLocked.
	listed   bool
	started  time.Time
	state    callState
	retireAt time.Time // when a cancelled call, or a task's token (zero: no ttl), is forgotten
	taskID   string    // the task a CreateTaskResult answered it with (stateTask)
	// Transport is the transport's own handle on the request's frame (the
	// stdio relay keeps its outbox ticket there). The tracker never reads it;
	// the transport sets and reads it on the issuer's side only.
	Transport Slot
	// onAnswer, set on the proxy's own requests, takes their response.
	onAnswer func(*framing.Message)
	// span follows the request in a trace; nil when it is not traced. Set
	// before the call is shared, by the issuer's side.
	span Span
	// list is the call's place in a governor's CallList, if any.
	list listing
}

func (c *call) aliased() bool { return c.upID != c.id }

func (c *call) tokenAliased() bool { return !c.ownToken && c.upToken != c.token }

// Slot is where a transport keeps its own handle on a request's frame: a
// reference and a number, meaning whatever the transport means by them. Ref
// should hold a pointer, so that storing it allocates nothing.
type Slot struct {
	Ref any
	Seq uint64
}

// Verdict is what the ledger decided about a frame.
type Verdict uint8

// Verdicts.
const (
	Forward  Verdict = iota // pass it on
	Suppress                // a late response or progress of a cancelled request
	Drop                    // invalid in this state (the reason says why)
	// Silence: a message about a request that has ended (answered, or
	// cancelled and forgotten), or progress under a token no request in
	// flight carries: its issuer must hear nothing more of it.
	Silence
)

// Reasons for Drop.
const (
	reasonNotInFlight  = "request is not in flight in this direction"
	reasonInitialize   = "initialize must not be cancelled"
	reasonNoRequestID  = "cancel has no usable requestId"
	reasonDuplicateID  = "request id is already in flight"
	reasonUnknownReply = "response names no request in flight"
)

// ledger tracks the requests of one direction.
type ledger struct {
	dir       Direction
	now       func() time.Time
	retireTTL time.Duration
	retireMax int

	// allowShared lets requests in flight share an issuer's id (a client
	// that sends every request with id 1, each on a stream of its own):
	// each after the first gets a receiver-side id of its own. Set before
	// use.
	allowShared bool

	mu sync.Mutex // guards the fields below
	// The calls in stateInFlight by the issuer's id, the oldest where
	// several share it, are listed (call.listed; live counts them). One
	// the receiver knows by the issuer's id, nearly every call, is found
	// in byUp under it, which spares a second map per frame; renamed holds
	// the others (aliased toward the receiver), by the issuer's id.
	live    int
	renamed *framing.IDMap[*call] // made at first use (renamedMap), as tokens
	tool    framing.LastName      // the tools/calls' tool names, interned
	// shared holds, with allowShared, the other calls in flight under an
	// id a listed call has, oldest first. Invariant: every call here is in
	// byUp.
	shared map[framing.ID][]*call
	// byUp holds calls in flight and retired (cancelled, late response not yet
	// seen) by the receiver-side id. Invariant: every listed call is here.
	byUp framing.IDMap[*call]
	// tokens maps receiver-side progress tokens to their call, in flight or
	// retired; made at first use (tokenMap): an idle session has none.
	tokens *framing.IDMap[*call]
	// retired lists cancelled calls oldest first, to forget them in time.
	retired []*call
	aliases uint64 // counter for receiver-side ids minted on collisions
	// tasks lists, oldest first, the calls in stateTask: their tokens
	// stay in tokens until their task ends, its ttl passes, or the
	// ledger goes with its session.
	tasks []*call
	// ended remembers the receiver-side ids of the calls answered last
	// (a ring), so that a second answer is told from an answer to a
	// request never sent; in the ledger itself, so that remembering costs
	// no allocation.
	ended     [endedMemory]framing.ID
	endedNext int
	// tasksOver remembers the ids of the tasks last seen terminal (a
	// ring), so that a message still tagged with one is kept back.
	tasksOver     *[endedMemory]string // made at the first task's end: most sessions see no task
	tasksOverNext int
}

// endedMemory is how many answered calls a ledger remembers by id.
const endedMemory = 8

// tokenMap returns tokens, made now if not yet.
func (l *ledger) tokenMap() *framing.IDMap[*call] {
	if l.tokens == nil {
		l.tokens = new(framing.IDMap[*call])
	}
	return l.tokens
}

// renamedMap returns renamed, made now if not yet.
func (l *ledger) renamedMap() *framing.IDMap[*call] {
	if l.renamed == nil {
		l.renamed = new(framing.IDMap[*call])
	}
	return l.renamed
}

// toolLocked is the interned name of a tools/call's tool, or "".
func (l *ledger) toolLocked(m *framing.Message) string {
	if m.Method != "tools/call" {
		return ""
	}
	return l.tool.Of(m)
}

// newLedger returns an empty ledger. Its maps are made when first written:
// many sessions, each HTTP request without a session, see one request in
// one direction only.
func newLedger(dir Direction, now func() time.Time, ttl time.Duration, max int) *ledger {
	l := &ledger{}
	l.init(dir, now, ttl, max)
	return l
}

// init sets up a zero ledger in place (a Tracker keeps its two).
func (l *ledger) init(dir Direction, now func() time.Time, ttl time.Duration, max int) {
	l.dir, l.now, l.retireTTL, l.retireMax = dir, now, ttl, max
}

// update runs f under the lock and then checks the ledger's invariants
// cheaply; a broken invariant is a bug in this package.
func (l *ledger) update(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	f()
	if n := l.live + l.sharedCountLocked(); n > l.byUp.Len() {
		panic(fmt.Sprintf("proxy: ledger %v: %d calls in flight but %d by receiver id", l.dir, n, l.byUp.Len()))
	}
}

// sharedCountLocked counts the calls in shared.
func (l *ledger) sharedCountLocked() int {
	n := 0
	for _, cs := range l.shared {
		n += len(cs)
	}
	return n
}

// inFlightLocked reports whether c is in flight.
func (l *ledger) inFlightLocked(c *call) bool {
	return c.listed || slices.Contains(l.shared[c.id], c)
}

// liveAtLocked returns the listed call in flight under the issuer's id,
// or nil.
func (l *ledger) liveAtLocked(id framing.ID) *call {
	if c := l.byUp.At(id); listedAs(c, id) {
		return c
	}
	return l.renamed.At(id)
}

// listedAs reports whether c, found in byUp under id, is the call listed
// under that id as its issuer's (not renamed, and in flight).
func listedAs(c *call, id framing.ID) bool { return c != nil && c.listed && c.id == id }

// listLocked lists c, in byUp already or about to be, as the call in
// flight under its issuer's id.
func (l *ledger) listLocked(c *call) {
	c.listed = true
	l.live++
	if c.aliased() {
		l.renamedMap().Set(c.id, c)
	}
}

// removeLocked takes c, in flight, off the list or out of shared; the
// oldest call sharing its id, if any, is listed in its place.
func (l *ledger) removeLocked(c *call) {
	if !c.listed {
		l.shared[c.id] = slices.DeleteFunc(l.shared[c.id], func(o *call) bool { return o == c })
		if len(l.shared[c.id]) == 0 {
			delete(l.shared, c.id)
		}
		return
	}
	c.listed = false
	l.live--
	if c.aliased() {
		l.renamed.Delete(c.id)
	}
	if rest := l.shared[c.id]; len(rest) > 0 {
		l.listLocked(rest[0])
		if l.shared[c.id] = rest[1:]; len(rest) == 1 {
			delete(l.shared, c.id)
		}
	}
}

// allInFlightLocked returns every call in flight.
func (l *ledger) allInFlightLocked() []*call {
	calls := make([]*call, 0, l.live)
	add := func(c *call) {
		calls = append(calls, c)
		calls = append(calls, l.shared[c.id]...)
	}
	for id, c := range l.byUp.All() {
		if listedAs(c, id) {
			add(c)
		}
	}
	for _, c := range l.renamed.All() {
		add(c)
	}
	return calls
}

// begin records a request, followed by span (nil if untraced). When its
// id is still held by a cancelled call whose late response may yet arrive,
// the request gets a fresh receiver-side id so that the two can never be
// confused. It reports Drop for an id that is already in flight.
func (l *ledger) begin(m *framing.Message, span Span) (c *call, v Verdict) {
	l.update(func() {
		l.expireLocked()        // first: a retired call it forgets frees its id
		held := l.byUp.At(m.ID) // the one lookup of most requests: the id is free
		dup := listedAs(held, m.ID) || l.renamed.Has(m.ID)
		if dup && !l.allowShared {
			v = Drop
			return
		}
		c = &call{id: m.ID, upID: m.ID, method: m.Method, tool: l.toolLocked(m), token: m.Token, upToken: m.Token,
			hasTask: m.HasTask, started: l.now(), span: span}
		if held != nil {
			c.upID = l.aliasLocked("")
			for l.byUp.Has(c.upID) {
				c.upID = l.aliasLocked("")
			}
		}
		l.byUp.Set(c.upID, c)
		if dup {
			if l.shared == nil {
				l.shared = map[framing.ID][]*call{}
			}
			l.shared[c.id] = append(l.shared[c.id], c)
		} else {
			l.listLocked(c)
		}
		if c.token.IsValid() {
			// A token still held by another call (a cancelled one whose late
			// progress may come) is renamed too, so progress is never misrouted.
			c.upToken = l.freeTokenLocked(c.upToken, "t")
			l.tokenMap().Set(c.upToken, c)
		}
	})
	return c, v
}

// freeTokenLocked returns tok, or, while another call holds it, a token
// of the proxy's own (kind as aliasLocked takes it) that none holds.
func (l *ledger) freeTokenLocked(tok framing.ID, kind string) framing.ID {
	for l.tokens.Has(tok) {
		tok = l.aliasLocked(kind)
	}
	return tok
}

// ownTokenPrefix begins every progress token the proxy adds to a request
// that carried none (see watch): progress under such a token is the
// proxy's, even after its request is forgotten, and never reaches a client.
const ownTokenPrefix = aliasPrefix + "w"

// watch gives c, a request without a progress token, one of the proxy's
// own, for the receiver to report progress under, and returns it. Called
// before the request is sent.
func (l *ledger) watch(c *call) framing.ID {
	l.update(func() {
		c.ownToken = true
		c.upToken = l.freeTokenLocked(l.aliasLocked("w"), "w")
		l.tokenMap().Set(c.upToken, c)
	})
	return c.upToken
}

// own records a request of the proxy's own, under an id no peer chose.
// It is never in flight by an issuer's id, so no peer can cancel it.
func (l *ledger) own(method string, onAnswer func(*framing.Message)) (c *call) {
	l.update(func() {
		id := l.aliasLocked("r")
		c = &call{id: id, upID: id, method: method, started: l.now(), onAnswer: onAnswer}
		l.byUp.Set(id, c)
	})
	return c
}

// adoptToken has c, a request of the proxy's own, carry token: progress
// under it is c's while c is in flight (a hosted task's call carries its
// client's token; the client's own call, served, gives it up).
func (l *ledger) adoptToken(c *call, token framing.ID) {
	l.update(func() {
		c.token, c.upToken = token, token
		l.tokenMap().Set(token, c)
	})
}

// ownInFlight reports whether c, a request of the proxy's own, is still
// unanswered, and marks it cancelled: it is cancelled once.
func (l *ledger) ownInFlight(c *call) (ok bool) {
	l.update(func() {
		ok = c.onAnswer != nil && c.state == stateInFlight && l.byUp.At(c.upID) == c
		if ok {
			c.state = stateCancelled
		}
	})
	return ok
}

// aliasPrefix begins every id and token the proxy mints.
const aliasPrefix = "mcp-cancel-proxy-"

// aliasLocked mints a receiver-side id or token that no peer chose.
func (l *ledger) aliasLocked(kind string) framing.ID {
	l.aliases++
	return framing.StringID(fmt.Sprintf(aliasPrefix+"%s%d", kind, l.aliases))
}

// complete settles the call that a response with receiver-side id upID
// answers: Forward if it was in flight, Suppress if it was cancelled (a late
// response), Silence if it was answered lately (a second answer), Drop if
// no such call is known. task, when not nil, is what the response says of
// a task it created (a CreateTaskResult): the call's progress token then
// lives on until that task ends.
func (l *ledger) complete(upID framing.ID, task *TaskAnswer) (c *call, v Verdict) {
	l.update(func() {
		c = l.byUp.At(upID)
		switch {
		case c == nil:
			v = Drop
			if upID.IsValid() && slices.Contains(l.ended[:], upID) {
				v = Silence
			}
		case c.onAnswer != nil: // the proxy's own request
			c.state = stateAnswered
			l.dropLocked(c)
		case c.state == stateInFlight:
			c.state = stateAnswered
			l.removeLocked(c)
			if task != nil && c.hasTask && task.ID != "" && c.token.IsValid() {
				l.taskLocked(c, task)
				return
			}
			l.byUp.Delete(upID) // c itself: just found there
			l.dropTokenLocked(c)
			l.endedLocked(c.upID)
		default: // cancelled: absorb the late response; progress stays suppressed until expiry
			v = Suppress
			l.byUp.Delete(upID)
		}
	})
	return c, v
}

// TaskAnswer is what a CreateTaskResult says of the task it created: its
// id, and how long the receiver keeps it (TTL zero: no bound given).
type TaskAnswer struct {
	ID  string
	TTL time.Duration
}

// taskLocked keeps c's progress token for its task, which the answer to
// c created: progress under it goes on to the issuer until the task ends.
func (l *ledger) taskLocked(c *call, task *TaskAnswer) {
	c.state, c.taskID, c.retireAt = stateTask, task.ID, time.Time{}
	if task.TTL > 0 {
		c.retireAt = l.now().Add(task.TTL)
	}
	if l.byUp.At(c.upID) == c {
		l.byUp.Delete(c.upID)
	}
	l.tasks = append(l.tasks, c)
	if len(l.tasks) > l.retireMax {
		l.dropLocked(l.tasks[0])
		l.tasks = l.tasks[1:]
	}
}

// taskEnded remembers task id, now terminal, and forgets the progress
// token of the call that created it, reporting whether one was kept.
func (l *ledger) taskEnded(id string) (ok bool) {
	l.update(func() {
		l.taskOverLocked(id)
		i := slices.IndexFunc(l.tasks, func(c *call) bool { return c.taskID == id })
		if i < 0 {
			return
		}
		l.dropLocked(l.tasks[i])
		l.tasks = slices.Delete(l.tasks, i, i+1)
		ok = true
	})
	return ok
}

// taskOverLocked remembers that task id has ended.
func (l *ledger) taskOverLocked(id string) {
	if l.tasksOver == nil {
		l.tasksOver = new([endedMemory]string)
	}
	if !slices.Contains(l.tasksOver[:], id) {
		l.tasksOver[l.tasksOverNext] = id
		l.tasksOverNext = (l.tasksOverNext + 1) % endedMemory
	}
}

// taskIsOver reports whether task id was seen terminal lately, or its ttl
// passed.
func (l *ledger) taskIsOver(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if id == "" {
		return false
	}
	now := l.now()
	return l.tasksOver != nil && slices.Contains(l.tasksOver[:], id) || slices.ContainsFunc(l.tasks, func(c *call) bool {
		return c.taskID == id && !c.retireAt.IsZero() && !now.Before(c.retireAt) // its ttl passed
	})
}

// endedLocked remembers upID, just answered, for a second answer.
func (l *ledger) endedLocked(upID framing.ID) {
	l.ended[l.endedNext] = upID
	l.endedNext = (l.endedNext + 1) % endedMemory
}

// teardown accepts the receiver's cancel of an issuer's
// subscriptions/listen, the one cancel a server may send about a client's
// request (2026-07-28, stdio: it ends the subscription so): the call is
// over, as if answered. upID is the id the receiver knows. It returns
// nil for any other call.
func (l *ledger) teardown(upID framing.ID) (c *call) {
	l.update(func() {
		c = l.byUp.At(upID)
		if c == nil || c.state != stateInFlight || c.method != framing.MethodSubscriptionsListen || c.onAnswer != nil {
			c = nil
			return
		}
		c.state = stateAnswered
		l.removeLocked(c)
		l.dropLocked(c)
	})
	return c
}

// listening returns the issuer's subscriptions/listen in flight that the
// receiver knows as upID, or nil.
func (l *ledger) listening(upID framing.ID) *call {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.byUp.At(upID)
	if c == nil || c.state != stateInFlight || c.method != framing.MethodSubscriptionsListen || c.onAnswer != nil {
		return nil
	}
	return c
}

// cancel accepts a cancel for the issuer's id if that request is in flight
// and is not initialize. The issuer's id is free again at once.
func (l *ledger) cancel(id framing.ID) (c *call, reason string) {
	l.update(func() {
		c = l.liveAtLocked(id)
		switch {
		case c == nil:
			reason = reasonNotInFlight
		case c.method == framing.MethodInitialize:
			reason = reasonInitialize
		default:
			l.retireLocked(c)
			l.expireLocked()
		}
	})
	if reason != "" {
		c = nil
	}
	return c, reason
}

// cancelShared cancels, after cancel accepted the oldest, every other
// call in flight under id (allowShared: a cancel naming an id several
// requests share is for each of them), and returns them.
func (l *ledger) cancelShared(id framing.ID) (calls []*call) {
	l.update(func() {
		for _, c := range slices.Clone(l.allOfLocked(id)) {
			if c.method != framing.MethodInitialize {
				calls = append(calls, c)
				l.retireLocked(c)
			}
		}
	})
	return calls
}

// allOfLocked returns the calls in flight under id.
func (l *ledger) allOfLocked(id framing.ID) []*call {
	c := l.liveAtLocked(id)
	if c == nil {
		return nil
	}
	return append([]*call{c}, l.shared[id]...)
}

// cancelExact cancels c if c itself is still in flight (not a later
// request that reuses its id), and reports whether it did.
func (l *ledger) cancelExact(c *call) (ok bool) {
	l.update(func() {
		if l.inFlightLocked(c) && c.method != framing.MethodInitialize {
			l.retireLocked(c)
			l.expireLocked()
			ok = true
		}
	})
	return ok
}

// forget removes a cancelled call whose request was never sent: no late
// response can come for it.
func (l *ledger) forget(c *call) {
	l.update(func() { l.dropLocked(c) })
}

// settle ends an in-flight call that the proxy answered itself, never
// sent (a re-issue that joined a running call).
func (l *ledger) settle(c *call) {
	l.update(func() {
		if c.state == stateInFlight {
			c.state = stateAnswered
			l.removeLocked(c)
			l.dropLocked(c)
		}
	})
}

// dropLocked removes c from the maps that still point at it.
func (l *ledger) dropLocked(c *call) {
	if l.byUp.At(c.upID) == c {
		l.byUp.Delete(c.upID)
	}
	l.dropTokenLocked(c)
}

// dropTokenLocked removes c's token from tokens, if it still points at c.
func (l *ledger) dropTokenLocked(c *call) {
	if c.upToken.IsValid() && l.tokens.At(c.upToken) == c {
		l.tokens.Delete(c.upToken)
	}
}

// progress looks up the receiver-side token of a progress notification. It
// reports Forward for a request in flight (or a task it created, until the
// task ends), Suppress for a cancelled request, and Silence for a token
// that no request in flight carries: its request has ended, or none ever
// carried it.
func (l *ledger) progress(token framing.ID) (c *call, v Verdict) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c = l.tokens.At(token)
	switch {
	case c == nil:
		return nil, Silence
	case c.state == stateCancelled:
		return c, Suppress
	case c.state == stateInFlight:
		return c, Forward
	case c.state == stateTask && (c.retireAt.IsZero() || l.now().Before(c.retireAt)):
		return c, Forward
	}
	return c, Silence // answered (its server gone), or its task's ttl passed
}

// retireLocked marks an in-flight call cancelled: its issuer's id is free
// at once; the call stays known by its receiver-side id for its late answer.
func (l *ledger) retireLocked(c *call) {
	c.state = stateCancelled
	c.retireAt = l.now().Add(l.retireTTL)
	l.removeLocked(c)
	l.retired = append(l.retired, c)
}

// cancelAll cancels every call in flight, but initialize, and returns them.
func (l *ledger) cancelAll() []*call {
	var calls []*call
	l.update(func() {
		for _, c := range l.allInFlightLocked() {
			if c.method == framing.MethodInitialize {
				continue
			}
			calls = append(calls, c)
			l.retireLocked(c)
		}
		l.expireLocked()
	})
	return calls
}

// failAll removes every call in flight and returns them, for answering the
// issuer when the receiver is gone.
func (l *ledger) failAll() []*call {
	var calls []*call
	l.update(func() {
		for _, c := range l.allInFlightLocked() {
			calls = append(calls, c)
			c.state, c.listed = stateAnswered, false
			l.dropLocked(c)
		}
		l.live = 0
		l.renamed.Clear()
		clear(l.shared)
	})
	return calls
}

// expireLocked forgets retired calls past their time or beyond the count
// bound. A response that arrives later for them is dropped as unknown, so
// the issuer still never sees it.
func (l *ledger) expireLocked() {
	if len(l.retired) == 0 && len(l.tasks) == 0 {
		return // nothing to forget: no clock read
	}
	now := l.now()
	n := 0
	for n < len(l.retired) && (len(l.retired)-n > l.retireMax || !now.Before(l.retired[n].retireAt)) {
		l.dropLocked(l.retired[n])
		l.retired[n] = nil
		n++
	}
	l.retired = l.retired[n:]
	if len(l.tasks) > 0 {
		l.tasks = slices.DeleteFunc(l.tasks, func(c *call) bool {
			past := !c.retireAt.IsZero() && !now.Before(c.retireAt)
			if past { // its receiver may forget the task: so is it over
				l.taskOverLocked(c.taskID)
				l.dropLocked(c)
			}
			return past
		})
	}
}

// counts returns the number of calls in flight and retired.
func (l *ledger) counts() (inFlight, retired int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.live + l.sharedCountLocked(), len(l.retired)
}

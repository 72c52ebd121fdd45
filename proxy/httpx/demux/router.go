// Package demux routes what a server of lines sends a client (a stdio
// server's stdout, an HTTP+SSE upstream's event stream, as a session of
// lines hands it on) to the stream of the request it belongs to: an answer
// to its request's stream, progress to the stream of the request whose
// token it names, the server's end of a subscription to that
// subscription's stream, other traffic to the newest open stream or the
// standalone one. Requests in flight under an id the client already uses
// (claude.ai sends every request with id 1), and every request of the
// server shared by sessionless clients, are renamed for the server and
// named back on the way out. A Streamable HTTP front keeps one Router per
// session of lines.
package demux

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// Route is one stream to the client that a Router feeds: the response
// stream of a POST, for its requests, or the standalone stream.
type Route interface {
	comparable
	// Send queues one of the server's messages for the client; answer says
	// it answers a request (it is then never dropped). It reports false
	// for the first message it drops, for a client that does not read.
	Send(line []byte, answer bool) bool
	// Settle says the last message of one of the route's requests is
	// being routed to it (its answer, or the end of its subscription).
	Settle()
	// Answered ends the route once every request of it is settled.
	Answered()
	// Cancelled says one of the route's requests was cancelled: with none
	// left, the route ends after grace.
	Cancelled(grace time.Duration)
	// End ends the route once what it holds is read.
	End()
	// Ended reports whether the route has ended.
	Ended() bool
}

// Router routes one session's messages for the client to its Routes.
type Router[R Route] struct {
	// New makes the route of requests ids (as the server knows them; none
	// for the standalone stream). Set before use.
	New func(ids []framing.ID) R

	mu sync.Mutex // guards the fields below
	// byID and byToken route answers and progress to their request's route.
	byID    map[framing.ID]R
	byToken map[framing.ID]R
	listen  R   // the standalone stream, if one is open
	routes  []R // every POST's route, to be ended when the session ends
	last    R   // the newest POST route still open
	closed  bool
	initID  framing.ID // the session's initialize request, once seen
	// listens marks the requests in byID that are subscriptions/listen
	// (2026-07-28): the server ends one with notifications/cancelled, which
	// goes on its route as its answer would, and ends it.
	listens map[framing.ID]bool
	// shared marks the router of the server that serves every sessionless
	// (2026-07-28) request: there, ids and progress tokens are renamed on
	// the way in, so that clients can never collide, and named back on the
	// way out.
	shared  bool
	origID  map[framing.ID]framing.ID // renamed id -> the client's
	origTok map[framing.ID]framing.ID // renamed token -> the client's
	renames uint64
}

// Delivery is what Deliver did with a message.
type Delivery uint8

// What Deliver did with a message.
const (
	// Delivered: the message went on its route.
	Delivered Delivery = iota
	// NoRoute: no stream was open for it; it was dropped.
	NoRoute
	// Dropped: its route was full (a client that does not read), and this
	// is the first message it dropped.
	Dropped
)

// Share makes r the router of the server shared by sessionless requests.
func (r *Router[R]) Share() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shared = true
}

// Deliver routes one message of the server's for the client (m is nil
// for one that is not a single valid message).
func (r *Router[R]) Deliver(m *framing.Message, line []byte) Delivery {
	var zero R
	r.mu.Lock()
	var rt R
	answer := m != nil && m.Kind == framing.KindResponse
	switch {
	case m != nil && m.Method == framing.MethodCancelled && r.listens[m.RequestID] && r.has(m.RequestID):
		rt, line = r.lastOfLocked(m.RequestID, m.RequestIDSpan, line) // the server ended the subscription
		answer = true
	case m != nil && m.Kind == framing.KindResponse && r.has(m.ID):
		rt, line = r.lastOfLocked(m.ID, m.IDSpan, line)
	case m != nil && m.Method == framing.MethodProgress && r.byToken[m.Token] != zero:
		rt = r.byToken[m.Token]
		if orig, ok := r.origTok[m.Token]; ok {
			line = framing.Splice(nil, line, m.TokenSpan, orig)
		}
	case r.shared:
		// 2026-07-28 has no stream for unrelated server traffic, and nothing
		// may go to another client's stream.
	case r.last != zero && !r.last.Ended():
		rt = r.last // related traffic of the newest call: sampling, logs, nested cancels
	default:
		rt = r.listen
	}
	r.mu.Unlock()
	if rt == zero {
		return NoRoute
	}
	d := Delivered
	if !rt.Send(line, answer) {
		d = Dropped
	}
	if answer {
		rt.Answered()
	}
	return d
}

// has reports whether a request id (as the server knows it) has a route.
// r.mu is held.
func (r *Router[R]) has(id framing.ID) bool {
	_, ok := r.byID[id]
	return ok
}

// lastOfLocked takes the route of the request id (as the server knows it)
// for the last message of that request, its answer or the server's ending
// of a subscription, and returns it with line under the client's id (span
// is where the id is in line). r.mu is held.
func (r *Router[R]) lastOfLocked(id framing.ID, span framing.Span, line []byte) (R, []byte) {
	rt := r.byID[id]
	delete(r.byID, id)
	delete(r.listens, id)
	if orig, ok := r.origID[id]; ok {
		delete(r.origID, id)
		line = framing.Splice(nil, line, span, orig)
	}
	rt.Settle()
	return rt, line
}

// End ends every route once the session is over: requests still waiting
// for an answer get the proxy's -32000 on their route, as the relay's do
// when its upstream's stream breaks (the server is gone: an upstream that
// closed its event stream, a child that exited; a stream that just ended
// would say nothing).
func (r *Router[R]) End() {
	var zero R
	r.mu.Lock()
	r.closed = true
	routes := append(r.routes, r.listen)
	r.routes = nil
	type owed struct {
		rt R
		id framing.ID
	}
	var unanswered []owed
	for id, rt := range r.byID {
		unanswered = append(unanswered, owed{rt, r.clientIDLocked(id)})
	}
	clear(r.byID)
	r.mu.Unlock()
	for _, o := range unanswered {
		o.rt.Send(ServerGone(o.id), true)
	}
	for _, rt := range routes {
		if rt != zero {
			rt.End()
		}
	}
}

// ClientID is the client's id of a request the server knows as id: the one
// it was renamed from, or id itself.
func (r *Router[R]) ClientID(id framing.ID) framing.ID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clientIDLocked(id)
}

// clientIDLocked is the client's id of a request the server knows as id
// (renamed when requests share an id). r.mu is held.
func (r *Router[R]) clientIDLocked(id framing.ID) framing.ID {
	if orig, ok := r.origID[id]; ok {
		return orig
	}
	return id
}

// ServerGone is the proxy's answer to a request whose server ended the
// session (or was gone) before answering it.
func ServerGone(id framing.ID) []byte {
	return proxy.ErrorReply(id, proxy.CodeServerGone, "the MCP server ended the session before answering")
}

// Rename gives a request an id (and progress token) of the proxy's own,
// remembered for the way back, and returns the line to send and the new
// id and token.
func (r *Router[R]) Rename(m *framing.Message) ([]byte, framing.ID, framing.ID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.renameLocked(m)
}

// renameLocked is Rename with r.mu held.
func (r *Router[R]) renameLocked(m *framing.Message) ([]byte, framing.ID, framing.ID) {
	if r.origID == nil {
		r.origID, r.origTok = map[framing.ID]framing.ID{}, map[framing.ID]framing.ID{}
	}
	r.renames++
	id := framing.StringID(fmt.Sprintf("h%d", r.renames))
	r.origID[id] = m.ID
	edits := []framing.Edit{{Span: m.IDSpan, To: id}}
	var tok framing.ID
	if m.Token.IsValid() {
		tok = framing.StringID(fmt.Sprintf("ht%d", r.renames))
		r.origTok[tok] = m.Token
		edits = append(edits, framing.Edit{Span: m.TokenSpan, To: tok})
	}
	return framing.Rewrite(nil, m.Raw, edits...), id, tok
}

// RenamedOf returns the ids requests in flight under the client's id were
// renamed to (requests that share an id, kept apart).
func (r *Router[R]) RenamedOf(id framing.ID) []framing.ID {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []framing.ID
	for renamed, orig := range r.origID {
		if orig == id && r.has(renamed) {
			out = append(out, renamed)
		}
	}
	return out
}

// Forget drops the route and the renames of a request whose stream is
// gone (id and tok as the server knows them).
func (r *Router[R]) Forget(id, tok framing.ID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.origID, id)
	delete(r.byID, id)
	if tok.IsValid() {
		delete(r.origTok, tok)
		delete(r.byToken, tok)
	}
}

// Abandon drops the route of request id if it is rt, and reports whether
// it was: the client left rt with the request unanswered.
func (r *Router[R]) Abandon(id framing.ID, rt R) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if got, ok := r.byID[id]; ok && got == rt {
		delete(r.byID, id)
		return true
	}
	return false
}

// Listen makes rt the standalone stream, ending the one before it.
func (r *Router[R]) Listen(rt R) {
	var zero R
	r.mu.Lock()
	old := r.listen
	r.listen = rt
	r.mu.Unlock()
	if old != zero {
		old.End()
	}
}

// Streaming reports whether a stream is open: a request whose client has
// left, its answer still unwritten, does not count.
func (r *Router[R]) Streaming() bool {
	var zero R
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.listen != zero && !r.listen.Ended() {
		return true
	}
	for _, rt := range r.byID {
		if !rt.Ended() {
			return true
		}
	}
	return false
}

// Admit registers a frame's requests and returns the line to send and the
// route for their answers (ok false if the frame holds no request). A
// request whose id the client already has in flight here is kept apart:
// renamed for the server, its answer named back.
func (r *Router[R]) Admit(f *framing.Frame, line []byte) (out []byte, rt R, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids, tokens []framing.ID
	var kept [][]byte
	renamed := false
	for i := range f.Msgs {
		m := &f.Msgs[i]
		if m.Kind == framing.KindRequest && (r.has(m.ID) || slices.Contains(ids, m.ID)) {
			raw, id, tok := r.renameLocked(m)
			kept, ids, renamed = append(kept, raw), append(ids, id), true
			r.markListenLocked(m, id)
			if tok.IsValid() {
				tokens = append(tokens, tok)
			}
			continue
		}
		kept = append(kept, m.Raw)
		if m.Kind == framing.KindRequest {
			if m.Method == framing.MethodInitialize {
				r.initID = m.ID // never cancelled: its cancel must not end its stream
			}
			ids = append(ids, m.ID)
			r.markListenLocked(m, m.ID)
			if m.Token.IsValid() {
				tokens = append(tokens, m.Token)
			}
		}
	}
	if renamed {
		line = proxy.JoinFrame(kept, f.Batch)
	}
	if len(ids) == 0 {
		return line, rt, false
	}
	return line, r.openLocked(ids, tokens), true
}

// markListenLocked notes a subscriptions/listen request, under the id the
// server knows (see listens). r.mu is held.
func (r *Router[R]) markListenLocked(m *framing.Message, id framing.ID) {
	if m.Method != framing.MethodSubscriptionsListen {
		return
	}
	if r.listens == nil {
		r.listens = map[framing.ID]bool{}
	}
	r.listens[id] = true
}

// Open registers requests (ids and progress tokens as the server knows
// them) and returns the route for their answers.
func (r *Router[R]) Open(ids, tokens []framing.ID) R {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.openLocked(ids, tokens)
}

// openLocked is Open with r.mu held.
func (r *Router[R]) openLocked(ids, tokens []framing.ID) R {
	rt := r.New(ids)
	r.routes = append(slices.DeleteFunc(r.routes, R.Ended), rt)
	if r.closed { // the server went before these requests could be sent
		for _, id := range ids {
			rt.Send(ServerGone(r.clientIDLocked(id)), true)
		}
		rt.End()
		return rt
	}
	if r.byID == nil {
		r.byID, r.byToken = map[framing.ID]R{}, map[framing.ID]R{}
	}
	for _, id := range ids {
		r.byID[id] = rt
	}
	for _, tok := range tokens {
		r.byToken[tok] = rt
	}
	r.last = rt
	return rt
}

// IsInitialize reports whether id is the session's initialize request,
// whose cancel the session drops (the client MUST NOT cancel it): its
// answer still comes, on its route.
func (r *Router[R]) IsInitialize(id framing.ID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.initID.IsValid() && r.initID == id
}

// Cancelled stops waiting for a request's answer; its route ends after the
// grace if it carries nothing else.
func (r *Router[R]) Cancelled(id framing.ID, grace time.Duration) {
	r.mu.Lock()
	rt, ok := r.byID[id]
	delete(r.byID, id)
	delete(r.listens, id)
	r.mu.Unlock()
	if ok {
		rt.Cancelled(grace)
	}
}

// Package demux routes what a session of lines sends a client (a stdio
// server's stdout, an HTTP+SSE upstream's event stream, as the session's
// core decided each message) to the stream of the request it is about: the
// core names that request (stdio.Options.Deliver), and the router keeps
// only which stream each request of the client's came on. Traffic about no
// request (the server's own requests, its notifications) goes to the
// newest open stream or the standalone one, a task's progress after its
// call was answered to the standalone one, and what is about a request
// the client cancelled or left nowhere. Ids that requests share, and the renaming that keeps
// them apart on the server, are the core's (its ledger's aliases). A
// Streamable HTTP front keeps one Router per session of lines.
package demux

import (
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
	// Send queues one of the server's messages for the client (line is
	// the caller's: Send copies what it keeps); answer says it answers a
	// request (it is then never dropped). It reports false
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
	// New makes the route of n requests (none for the standalone
	// stream). Set before use.
	New func(n int) R

	mu     sync.Mutex        // guards the fields below
	routes map[*proxy.Call]R // the route of each request of the client's not yet ended
	listen R                 // the standalone stream, if one is open
	all    []R               // every POST's route, to be ended when the session ends
	last   R                 // the newest POST route
	closed bool
	// shared marks the router of the server that serves every sessionless
	// (2026-07-28) request: nothing goes to a stream but what is about its
	// own request.
	shared bool
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

// Deliver routes one message for the client, about the request about (nil
// for none), which it ends when last (see stdio.Deliver).
func (r *Router[R]) Deliver(line []byte, about *proxy.Call, last bool) Delivery {
	var zero R
	r.mu.Lock()
	rt, ok := r.routes[about]
	switch {
	case ok && last:
		delete(r.routes, about)
		rt.Settle()
	case ok:
	case r.shared, len(line) == 0:
		// 2026-07-28 has no stream for unrelated server traffic, and nothing
		// may go to another client's stream.
	case about == nil:
		rt = r.otherLocked()
	case about.TaskID() != "":
		rt = r.listen // a task's progress, after the answer that made the task
	default:
		// About a request whose stream the client left or cancelled, decided
		// before it did: no other request's stream may carry it.
	}
	r.mu.Unlock()
	if rt == zero {
		return NoRoute
	}
	d := Delivered
	if len(line) > 0 && !rt.Send(line, last) { // an empty line: about ended, in a batch gone elsewhere
		d = Dropped
	}
	if last {
		rt.Answered()
	}
	return d
}

// otherLocked is the route of the server's traffic about no open request:
// the newest call's (sampling, logs, nested cancels of that call), or the
// standalone stream. r.mu is held.
func (r *Router[R]) otherLocked() R {
	var zero R
	if r.last != zero && !r.last.Ended() {
		return r.last
	}
	return r.listen
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
	routes := append(r.all, r.listen)
	r.all = nil
	owed := r.routes
	r.routes = nil
	r.mu.Unlock()
	for c, rt := range owed {
		rt.Send(ServerGone(c.ID()), true)
	}
	for _, rt := range routes {
		if rt != zero {
			rt.End()
		}
	}
}

// ServerGone is the proxy's answer to a request whose server ended the
// session (or was gone) before answering it.
func ServerGone(id framing.ID) []byte {
	return proxy.ErrorReply(id, proxy.CodeServerGone, "the MCP server ended the session before answering")
}

// Open returns the route for the answers of calls, a frame's requests,
// and routes them to it.
func (r *Router[R]) Open(calls []*proxy.Call) R {
	rt := r.New(len(calls))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(slices.DeleteFunc(r.all, R.Ended), rt)
	if r.closed { // the server went before these requests could be sent
		for _, c := range calls {
			rt.Send(ServerGone(c.ID()), true)
		}
		rt.End()
		return rt
	}
	if r.routes == nil {
		r.routes = map[*proxy.Call]R{}
	}
	for _, c := range calls {
		r.routes[c] = rt
	}
	r.last = rt
	return rt
}

// Cancelled stops waiting for a request's answer (the client cancelled
// it); its route ends after the grace if it carries nothing else.
func (r *Router[R]) Cancelled(c *proxy.Call, grace time.Duration) {
	r.mu.Lock()
	rt, ok := r.routes[c]
	delete(r.routes, c)
	r.mu.Unlock()
	if ok {
		rt.Cancelled(grace)
	}
}

// Abandon drops the route of c if it is rt, and reports whether it was:
// the client left rt with the request unanswered.
func (r *Router[R]) Abandon(c *proxy.Call, rt R) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if got, ok := r.routes[c]; ok && got == rt {
		delete(r.routes, c)
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
	for _, rt := range r.routes {
		if !rt.Ended() {
			return true
		}
	}
	return false
}

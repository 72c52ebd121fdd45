package proxy

import (
	"fmt"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// A Governor applies per-request policy to one session's client requests:
// deadlines, queues, compensating hooks, the audit trail (package policy
// implements it). The tracker admits each request through it and tells it
// what happens after, on the goroutine that decided it; no method may
// block. It acts back through the session's Actions, which it must call
// from a goroutine of its own, never from inside one of these methods. A
// transport only makes one and closes it; the rest is the tracker's.
type Governor interface {
	// Admit is told of a client request the tracker accepted, and says
	// what the transport must do about it.
	Admit(c *Call, m *framing.Message) Admission
	// Observe is told of everything else that happens to the session's
	// calls: see ChangeKind. It is told before the Event of the same
	// decision is emitted, so that what it arms (a timer) is armed once
	// the event is seen.
	Observe(ev Change)
	// Close ends the session's governance: timers stop, calls still in
	// flight are settled.
	Close()
}

// ChangeKind is what happened, for Governor.Observe.
type ChangeKind uint8

const (
	// ChangeProgress: progress from the server (Msg) for Call, in flight.
	ChangeProgress ChangeKind = iota
	// ChangeAnswered: the server's response (Msg) to Call, in flight; Msg
	// is nil when the tracker ended the call itself.
	ChangeAnswered
	// ChangeCancelled: Call was cancelled, by Source, for Reason.
	ChangeCancelled
	// ChangeWithdrawn: the cancelled Call was never sent to the server.
	ChangeWithdrawn
	// ChangeLate: a response (Msg) came after Call's cancel; the tracker
	// suppressed it.
	ChangeLate
	// ChangeCancelMissed: a client cancel named ID, which no call in flight has.
	ChangeCancelMissed
	// ChangeServerReady: the server's answer (Msg) to initialize.
	ChangeServerReady
)

// Change is one thing that happened to a session's call, for
// Governor.Observe; the fields its Kind names are set.
type Change struct {
	Kind   ChangeKind
	Call   *Call
	Msg    *framing.Message
	Source Source
	Reason string
	ID     framing.ID
}

// Source says where a cancel came from.
type Source string

// The sources of a cancel.
const (
	SourceClient   Source = "client"   // the client's notifications/cancelled
	SourceDeadline Source = "deadline" // the policy's deadline passed
	// SourceClientTimeout: the policy's client_timeout passed, the time
	// its client waits before it gives up on the call without a word.
	SourceClientTimeout Source = "client_timeout"
	SourceDisconnect    Source = "disconnect"  // the client's stream closed (2026-07-28), or its grace ran out
	SourceSessionEnd    Source = "session_end" // the client ended the session (DELETE)
	SourceShutdown      Source = "shutdown"    // the proxy is stopping
	// SourceTaskCancel: the client's tasks/cancel of a task the proxy
	// hosts; SourceTaskTTL: the task's ttl passed before it ended.
	SourceTaskCancel Source = "tasks_cancel"
	SourceTaskTTL    Source = "task_ttl"
)

// Admission is what a Governor asks of a request's transport.
type Admission struct {
	// Hold keeps the request in the transport until Actions.Dispatch.
	Hold bool
	// Timed says the request has a deadline: the transport must be ready
	// to end it (Actions.Expire) at any moment, even before the server
	// has begun to answer.
	Timed bool
	// WantsLate says the governor wants to see the request's answer even
	// if it comes after a cancel (a hook compensates it): the transport
	// should keep reading the server's answer a while after the cancel.
	WantsLate bool
	// Rewrite says the governor rewrites the server's answer to the
	// request (the Governor is a Rewriter).
	Rewrite bool
	// WatchProgress says the governor wants the request's progress (its
	// deadline resets on it): if the request carries no progress token
	// and is not task-augmented, the tracker gives it a token of the
	// proxy's own, and keeps the progress sent under it from the issuer,
	// who asked for none.
	WatchProgress bool
	// DeferCancel says the client's cancel of the request is the
	// governor's to send (Actions.ReleaseCancel), not the transport's: a
	// re-issue may yet join the call (reissue: join). The client's cancel
	// is its notifications/cancelled (Source client), or, where closing
	// the request's stream is the cancel (protocol 2026-07-28), that
	// close (Source disconnect). The client is freed at once all the
	// same. Only a transport whose Session defers cancels
	// (SessionOptions.DeferCancels) honours it.
	DeferCancel bool
}

// Actions is what a transport does for its session's Governor.
type Actions interface {
	// Expire cancels a call at its deadline (source SourceDeadline) or its
	// client's timeout (SourceClientTimeout), upstream as a client cancel
	// would, and answers the client with reply.
	Expire(c *Call, source Source, reason string, reply []byte)
	// Dispatch sends a request that Request asked to hold. A request
	// withdrawn meanwhile (cancelled while held) is not sent.
	Dispatch(c *Call)
	// SendOwn sends the server a request of the proxy's own (see
	// Tracker.OwnRequest); its response goes to onAnswer, not the client.
	// progress, if valid, is the progress token params carry, whose
	// progress goes to the client until the request is answered or
	// cancelled. It returns the request, for CancelOwn.
	SendOwn(method string, params []byte, progress framing.ID, onAnswer func(*framing.Message)) *Call
	// CancelOwn cancels a request of the proxy's own on the server, as
	// from source for reason, unless it was answered.
	CancelOwn(c *Call, source Source, reason string)
	// Serve answers a held request with reply in place of the server: the
	// proxy serves it (a task it hosts). It reports whether the request
	// was still held.
	Serve(c *Call, reply []byte) bool
	// Restart stops the server and starts it again, where the transport
	// can (the stdio wrapper); it reports whether it will.
	Restart(reason string) bool
	// After runs f once the message the transport is handling now, if any,
	// has been handled completely (a cancel's request withdrawn or not).
	After(f func())
	// Answer answers a held request with reply in place of the server: it
	// joined a call already running (reissue: join) and is never sent. It
	// reports whether the request was still held.
	Answer(c *Call, reply []byte) bool
	// Notify sends c's issuer frame, a notification about c (the progress
	// of the call it joined), where the transport can.
	Notify(c *Call, frame []byte)
	// ReleaseCancel sends the server the client's cancel of c that the
	// governor deferred (Admission.DeferCancel), or, unless send, forgets
	// it (the call ended; no cancel is owed).
	ReleaseCancel(c *Call, send bool)
	// DefersCancels reports whether the session honours
	// Admission.DeferCancel: it is one client's, and reads a cancelled
	// call's answer on. Only there may a re-issue join a call (a session
	// that several clients share must never give one another's result).
	DefersCancels() bool
	// Principal says who sent c where the session is several clients'
	// (requests without a session, protocol 2026-07-28): a digest of the
	// credential its request carried, "" when it carried none, and true.
	// It reports false in a session that is one client's. A re-issue
	// joins only a call of the same principal.
	Principal(c *Call) (string, bool)
	// Owner says whose c is, for the bounds that no one client may take
	// all of (the tasks the proxy hosts): its principal (the session; in a
	// session several clients share, the credential its request carried,
	// or for none its address) and its peer (the client's address, or
	// behind a trusted proxy its client's). Both are "" where the process
	// serves one client (the wrapper, the bridge).
	Owner(c *Call) (principal, peer string)
}

// CodeDeadline is the JSON-RPC error code of the proxy's answer to a
// request whose deadline passed: -32001, which the TypeScript SDK calls
// RequestTimeout, so clients treat it as a timeout. The error's data names
// the proxy and the deadline.
const CodeDeadline = -32001

// DeadlineReply builds the answer to a request whose deadline passed.
func DeadlineReply(id framing.ID, timeout string) []byte {
	return framing.AppendErrorResponse(nil, id, framing.ErrorObject{Code: CodeDeadline,
		Message: fmt.Sprintf("Request timed out: the proxy's deadline of %s passed", timeout),
		Data:    map[string]string{"proxy": proxyName, "reason": "deadline", "timeout": timeout}})
}

// ClientTimeoutReply builds the answer to a request whose client's
// timeout (client_timeout) passed: the deadline's error, whose data says
// why (reason "client_timeout") and the budget, for a client that still
// reads it (one that waits longer than the proxy was told).
func ClientTimeoutReply(id framing.ID, budget string) []byte {
	return framing.AppendErrorResponse(nil, id, framing.ErrorObject{Code: CodeDeadline,
		Message: fmt.Sprintf("Request timed out: its client's wait of %s passed, and the proxy cancelled it (client_timeout)", budget),
		Data:    map[string]string{"proxy": proxyName, "reason": string(SourceClientTimeout), "timeout": budget}})
}

// OwnRequest registers a request of the proxy's own to the server, under
// an id no client chose, and returns its frame. Its response never reaches
// the client: it is handed to onAnswer, on the server's goroutine.
func (t *Tracker) OwnRequest(method string, params []byte, onAnswer func(m *framing.Message)) []byte {
	_, frame := t.OwnCall(method, params, framing.ID{}, onAnswer)
	return frame
}

// Started returns when the tracker saw the request.
func (c *Call) Started() int64 { return c.started.UnixNano() }

// Token returns the request's progress token as its issuer sent it.
func (c *Call) Token() framing.ID { return c.token }

// HasTask reports whether the request was task-augmented.
func (c *Call) HasTask() bool { return c.hasTask }

// TaskID is the task the request's answer created (a CreateTaskResult),
// whose progress goes on under the request's token; "" for none. Set
// before that answer is passed on.
func (c *Call) TaskID() string { return c.taskID }

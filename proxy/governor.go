package proxy

import (
	"fmt"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// A Governor applies per-request policy to one session's client requests:
// deadlines, queues, compensating hooks, the audit trail (package policy
// implements it). The tracker tells it what happens to each request, on
// the goroutine that decided it; no method may block. It acts back through
// the session's Actions, which it must call from a goroutine of its own,
// never from inside one of these methods.
type Governor interface {
	// Request is told of a client request the tracker accepted, and says
	// what the transport must do about it.
	Request(c *Call, m *framing.Message) Admission
	// Progress is told of progress from the server for a call in flight.
	Progress(c *Call, m *framing.Message)
	// Answered is told of the server's response to a call in flight.
	Answered(c *Call, m *framing.Message)
	// Cancelled is told that a call was cancelled: source is "client",
	// "deadline", "disconnect", "session_end" or "shutdown".
	Cancelled(c *Call, source, reason string)
	// Withdrawn is told that a cancelled call was never sent to the server.
	Withdrawn(c *Call)
	// Late is told of a response that came after the call's cancel, which
	// the tracker suppressed.
	Late(c *Call, m *framing.Message)
	// CancelMissed is told of a client cancel that named no call in flight.
	CancelMissed(id framing.ID)
	// ServerInitialized is told of the server's answer to initialize.
	ServerInitialized(m *framing.Message)
	// Close ends the session's governance: timers stop, calls still in
	// flight are settled.
	Close()
}

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
}

// Actions is what a transport does for its session's Governor.
type Actions interface {
	// Expire cancels a call at its deadline, upstream as a client cancel
	// would (CancelCall with source "deadline"), and answers the client
	// with reply.
	Expire(c *Call, reason string, reply []byte)
	// Dispatch sends a request that Request asked to hold. A request
	// withdrawn meanwhile (cancelled while held) is not sent.
	Dispatch(c *Call)
	// SendOwn sends the server a request of the proxy's own (see
	// Tracker.OwnRequest); its response goes to onAnswer, not the client.
	SendOwn(method string, params []byte, onAnswer func(*framing.Message))
	// Restart stops the server and starts it again, where the transport
	// can (the stdio wrapper); it reports whether it will.
	Restart(reason string) bool
	// After runs f once the message the transport is handling now, if any,
	// has been handled completely (a cancel's request withdrawn or not).
	After(f func())
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

// OwnRequest registers a request of the proxy's own to the server, under
// an id no client chose, and returns its frame. Its response never reaches
// the client: it is handed to onAnswer, on the server's goroutine.
func (t *Tracker) OwnRequest(method string, params []byte, onAnswer func(m *framing.Message)) []byte {
	c := t.peers[Client].issued.own(method, onAnswer)
	dst := append([]byte(`{"jsonrpc":"2.0","id":`), c.upID.AppendJSON(nil)...)
	dst = append(dst, `,"method":`...)
	dst = framing.StringID(method).AppendJSON(dst)
	dst = append(dst, `,"params":`...)
	dst = append(dst, params...)
	return append(dst, '}')
}

// Started returns when the tracker saw the request.
func (c *Call) Started() int64 { return c.started.UnixNano() }

// Token returns the request's progress token as its issuer sent it.
func (c *Call) Token() framing.ID { return c.token }

// HasTask reports whether the request was task-augmented.
func (c *Call) HasTask() bool { return c.hasTask }

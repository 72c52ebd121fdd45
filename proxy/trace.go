package proxy

import (
	"strconv"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// A Tracer follows each request a session relays, in either direction, as
// a span of a distributed trace (package telemetry implements it with
// OpenTelemetry). One serves one session; nil means no tracing, and then
// nothing of this file runs. Its methods are called on the hot path and
// must not block.
type Tracer interface {
	// Start begins the span of a request m the tracker is about to
	// forward from a peer. The span continues the trace context m carries
	// in params._meta, or else parent (the transport's own, such as an
	// HTTP request's traceparent header), if valid.
	Start(from Peer, m *framing.Message, parent TraceContext) Span
}

// TraceContext is a W3C trace context: the traceparent and tracestate
// values, as written in params._meta or in HTTP headers.
type TraceContext struct {
	Parent, State string
}

// A Span follows one relayed request. It ends once: further calls to End
// do nothing, and nor do events after it.
type Span interface {
	// Event records something the proxy did for the request.
	Event(name string, attrs ...Attr)
	// Child starts a span under this one: a hook's attempt, a restart.
	Child(name string, attrs ...Attr) Span
	// Set adds attributes to the span.
	Set(attrs ...Attr)
	// Answered ends the span with the answer the request got (m), or with
	// the proxy's own error (code and msg) when m is nil.
	Answered(m *framing.Message, code int, msg string)
	// End ends the span with the request's outcome in plain words; failed
	// marks the span an error, the outcome its description.
	End(outcome string, failed bool)
	// Context is the trace context to give whoever the request goes to.
	Context() TraceContext
}

// Attr is one attribute of a span or of one of its events.
type Attr struct {
	Key   string
	Value string
	Int   int64
	IsInt bool
}

// String returns a string attribute.
func String(key, value string) Attr { return Attr{Key: key, Value: value} }

// Int returns an integer attribute.
func Int(key string, value int) Attr { return Attr{Key: key, Int: int64(value), IsInt: true} }

// String formats an attribute's value.
func (a Attr) String() string {
	if a.IsInt {
		return strconv.FormatInt(a.Int, 10)
	}
	return a.Value
}

// The events a request's span records, for what the proxy did.
const (
	EventCancelAccepted  = "cancel accepted"
	EventCancelForwarded = "cancel forwarded upstream"
	EventDeadline        = "deadline fired"
	EventClientTimeout   = "client timeout passed"
	EventLateSuppressed  = "late answer suppressed"
	EventProgressDropped = "progress suppressed"
	EventWithdrawn       = "withdrawn before dispatch"
	EventTasksCancel     = "tasks/cancel sent"
)

// Attribute keys of the proxy's own, beside the semantic conventions'.
const (
	AttrSource  = "mcp_cancel_proxy.cancel.source"
	AttrReason  = "mcp_cancel_proxy.cancel.reason"
	AttrOutcome = "mcp_cancel_proxy.outcome"
)

// Traced reports whether the request is followed by a span.
func (c *Call) Traced() bool { return c.span != nil }

// noSpan is the span of a request nobody traces: it does nothing, and
// storing it in a Span allocates nothing.
type noSpan struct{}

// NoSpan is the span of every request nobody traces (see Call.Span).
var NoSpan Span = noSpan{}

func (noSpan) Event(string, ...Attr)                  {}
func (noSpan) Child(string, ...Attr) Span             { return noSpan{} }
func (noSpan) Set(...Attr)                            {}
func (noSpan) Answered(*framing.Message, int, string) {}
func (noSpan) End(string, bool)                       {}
func (noSpan) Context() TraceContext                  { return TraceContext{} }

// Span returns the request's span; one that does nothing when the request
// is not traced.
func (c *Call) Span() Span {
	if c.span == nil {
		return NoSpan
	}
	return c.span
}

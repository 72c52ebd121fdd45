package telemetry

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// Attribute keys of the semantic conventions for MCP.
const (
	attrMethod        = "mcp.method.name"
	attrProtocol      = "mcp.protocol.version"
	attrRequestID     = "jsonrpc.request.id"
	attrTool          = "gen_ai.tool.name"
	attrPrompt        = "gen_ai.prompt.name"
	attrOperation     = "gen_ai.operation.name"
	attrTransport     = "network.transport"
	attrErrorType     = "error.type"
	attrRPCStatusCode = "rpc.response.status_code"
	attrDirection     = "mcp_cancel_proxy.direction"
)

// Error types beside the JSON-RPC codes.
const (
	errCancelled = "cancelled"
	errOther     = "_OTHER"
)

// session is one session's tracer.
type session struct {
	t         *Telemetry
	transport string
	version   atomic.Pointer[string] // the protocol version initialize settled on
}

// Start implements proxy.Tracer.
func (s *session) Start(from proxy.Peer, m *framing.Message, parent proxy.TraceContext) proxy.Span {
	sp := &span{s: s, from: from, method: m.Method, start: time.Now()}
	if m.Method == "tools/call" || m.Method == "prompts/get" {
		sp.target = m.Name()
	}
	if s.t.tracer == nil {
		return sp
	}
	carrier := propagation.MapCarrier{}
	if p, st := m.TraceContext(); p != "" {
		carrier["traceparent"], carrier["tracestate"] = p, st
	} else if parent.Parent != "" {
		carrier["traceparent"], carrier["tracestate"] = parent.Parent, parent.State
	}
	ctx := s.t.prop.Extract(context.Background(), carrier)
	name := m.Method
	if sp.target != "" {
		name += " " + sp.target
	}
	dir := proxy.ClientToServer
	if from == proxy.Server {
		dir = proxy.ServerToClient
	}
	attrs := append(make([]attribute.KeyValue, 0, 8), attribute.String(attrMethod, m.Method),
		attribute.String(attrTransport, s.transport), attribute.String(attrDirection, dir.String()))
	if m.ID.IsValid() {
		attrs = append(attrs, attribute.String(attrRequestID, idText(m.ID)))
	}
	if v := s.version.Load(); v != nil {
		attrs = append(attrs, attribute.String(attrProtocol, *v))
	}
	switch {
	case m.Method == "tools/call" && sp.target != "":
		attrs = append(attrs, attribute.String(attrTool, sp.target), attribute.String(attrOperation, "execute_tool"))
	case m.Method == "prompts/get" && sp.target != "":
		attrs = append(attrs, attribute.String(attrPrompt, sp.target))
	}
	sp.ctx, sp.otel = s.t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	return sp
}

// span is one request's span, or one of its children (a hook's attempt,
// a restart), which records no duration.
type span struct {
	s      *session
	from   proxy.Peer
	method string
	target string // the tool or prompt
	start  time.Time
	child  bool
	otel   trace.Span // nil without traces
	ctx    context.Context

	mu        sync.Mutex
	ended     bool
	cancelled bool
	measured  bool // its duration is recorded
}

// Event implements proxy.Span. A cancel ends the request's duration: the
// client was answered, or freed, then.
func (sp *span) Event(name string, attrs ...proxy.Attr) {
	if name == proxy.EventCancelAccepted {
		sp.mu.Lock()
		sp.cancelled = true
		sp.mu.Unlock()
		sp.measure(errCancelled)
	}
	if sp.otel != nil {
		sp.otel.AddEvent(name, trace.WithAttributes(convert(attrs)...))
	}
}

// Child implements proxy.Span.
func (sp *span) Child(name string, attrs ...proxy.Attr) proxy.Span {
	if sp.otel == nil {
		return proxy.NoSpan
	}
	c := &span{s: sp.s, from: sp.from, method: sp.method, start: time.Now(), child: true}
	c.ctx, c.otel = sp.s.t.tracer.Start(sp.ctx, name, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(convert(attrs)...))
	return c
}

// Set implements proxy.Span.
func (sp *span) Set(attrs ...proxy.Attr) {
	if sp.otel != nil {
		sp.otel.SetAttributes(convert(attrs)...)
	}
}

// Context implements proxy.Span.
func (sp *span) Context() proxy.TraceContext {
	if sp.otel == nil {
		return proxy.TraceContext{}
	}
	carrier := propagation.MapCarrier{}
	sp.s.t.prop.Inject(sp.ctx, carrier)
	return proxy.TraceContext{Parent: carrier["traceparent"], State: carrier["tracestate"]}
}

// Answered implements proxy.Span.
func (sp *span) Answered(m *framing.Message, code int, msg string) {
	errType := ""
	switch {
	case m == nil:
		errType = strconv.Itoa(code)
	case m.IsError:
		code, msg = errorOf(m.Raw)
		errType = strconv.Itoa(code)
	case sp.method == framing.MethodInitialize:
		sp.s.noteVersion(m.Raw)
	}
	if !sp.finish(errType) || sp.otel == nil {
		return
	}
	outcome := "answered"
	if errType != "" {
		outcome = "answered with an error"
		if m == nil {
			outcome = "answered by the proxy with an error"
		}
		sp.otel.SetAttributes(attribute.String(attrErrorType, errType), attribute.String(attrRPCStatusCode, errType))
		sp.otel.SetStatus(codes.Error, msg)
	}
	sp.otel.SetAttributes(attribute.String(proxy.AttrOutcome, outcome))
	sp.otel.End()
}

// End implements proxy.Span.
func (sp *span) End(outcome string, failed bool) {
	sp.mu.Lock()
	errType := ""
	if sp.cancelled {
		errType = errCancelled
	} else if failed {
		errType = errOther
	}
	sp.mu.Unlock()
	if !sp.finish(errType) || sp.otel == nil {
		return
	}
	sp.otel.SetAttributes(attribute.String(proxy.AttrOutcome, outcome))
	if failed {
		sp.otel.SetAttributes(attribute.String(attrErrorType, errType))
		sp.otel.SetStatus(codes.Error, outcome)
	}
	sp.otel.End()
}

// finish marks the span ended, once, and records the duration of a
// client's request if no cancel did; it reports whether it was the first
// end.
func (sp *span) finish(errType string) bool {
	sp.mu.Lock()
	first := !sp.ended
	sp.ended = true
	sp.mu.Unlock()
	if first {
		sp.measure(errType)
	}
	return first
}

// measure records, once, the duration of a client's request so far.
func (sp *span) measure(errType string) {
	sp.mu.Lock()
	done := sp.measured
	sp.measured = true
	sp.mu.Unlock()
	if done || sp.child || sp.from != proxy.Client || sp.s.t.durations == nil {
		return
	}
	tool, version := "", ""
	if sp.method == "tools/call" {
		tool = sp.target
	}
	if v := sp.s.version.Load(); v != nil {
		version = *v
	}
	sp.s.t.durations.Operation(sp.method, tool, errType, sp.s.transport, version, time.Since(sp.start))
}

// noteVersion keeps the protocol version of a session's initialize answer.
func (s *session) noteVersion(raw []byte) {
	var r struct {
		Result struct {
			ProtocolVersion string `json:"protocolVersion"`
		} `json:"result"`
	}
	if json.Unmarshal(raw, &r) == nil && r.Result.ProtocolVersion != "" {
		v := r.Result.ProtocolVersion
		s.version.Store(&v)
	}
}

// errorOf reads the code and message of an error response.
func errorOf(raw []byte) (int, string) {
	var r struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	json.Unmarshal(raw, &r)
	return r.Error.Code, r.Error.Message
}

// idText is a request id as the conventions write it: a string id without
// its quotes.
func idText(id framing.ID) string {
	s := id.String()
	var str string
	if len(s) > 0 && s[0] == '"' && json.Unmarshal([]byte(s), &str) == nil {
		return str
	}
	return s
}

// convert turns the proxy's attributes into OpenTelemetry's.
func convert(attrs []proxy.Attr) []attribute.KeyValue {
	out := make([]attribute.KeyValue, len(attrs))
	for i, a := range attrs {
		if a.IsInt {
			out[i] = attribute.Int64(a.Key, a.Int)
		} else {
			out[i] = attribute.String(a.Key, a.Value)
		}
	}
	return out
}

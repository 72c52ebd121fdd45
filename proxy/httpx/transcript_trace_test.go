package httpx_test

import (
	"strings"
	"sync"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/internal/transcript"
)

// tracesSeen is a recording tracer for the replay: the trace each client
// request's span is in, continued from its params._meta or from the
// transport's context (the POST's traceparent header). Its spans give the
// server no context of their own, so what the server gets is unchanged.
type tracesSeen struct {
	mu   sync.Mutex
	byID map[string]string // the client's request id -> its span's trace id
}

func (ts *tracesSeen) tracer() proxy.Tracer { return ts }

// Start implements proxy.Tracer.
func (ts *tracesSeen) Start(from proxy.Peer, m *framing.Message, parent proxy.TraceContext) proxy.Span {
	if from == proxy.Client {
		tp := parent.Parent
		if m.TraceParentSpan.Found() {
			tp = string(m.Raw[m.TraceParentSpan.Start:m.TraceParentSpan.End])
			tp = strings.Trim(tp, `"`)
		}
		trace := ""
		if parts := strings.Split(tp, "-"); len(parts) == 4 {
			trace = parts[1]
		}
		ts.mu.Lock()
		if ts.byID == nil {
			ts.byID = map[string]string{}
		}
		ts.byID[m.ID.String()] = trace
		ts.mu.Unlock()
	}
	return noSpan{}
}

// seen returns the trace of the client's request id, once its span began.
func (ts *tracesSeen) seen(id string) (string, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t, ok := ts.byID[id]
	return t, ok
}

// noSpan records nothing and gives the server no context.
type noSpan struct{}

func (noSpan) Event(string, ...proxy.Attr)            {}
func (noSpan) Child(string, ...proxy.Attr) proxy.Span { return noSpan{} }
func (noSpan) Set(...proxy.Attr)                      {}
func (noSpan) Answered(*framing.Message, int, string) {}
func (noSpan) End(string, bool)                       {}
func (noSpan) Context() proxy.TraceContext            { return proxy.TraceContext{} }

// trace checks that the span of the client's request st names is in the
// trace st names: the tracer saw it when the request was decided, which
// the server's receiving it (an earlier step) followed.
func (r *replay) trace(st transcript.Step) {
	r.t.Helper()
	f := strings.Fields(st.Arg)
	id, want := f[0], f[1]
	deadline := time.After(10 * time.Second)
	for {
		if got, ok := r.traces.seen(id); ok {
			if got != want {
				r.t.Fatalf("steps line %d: request %s's span is in trace %q, want %s", st.Line, id, got, want)
			}
			return
		}
		select {
		case <-r.moved:
		case <-deadline:
			r.t.Fatalf("steps line %d: no span began for request %s", st.Line, id)
		}
	}
}

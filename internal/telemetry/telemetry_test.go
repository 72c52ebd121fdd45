package telemetry

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/otlptest"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// durations records what the tracer reports.
type durations struct {
	mu  sync.Mutex
	ops []string
}

func (d *durations) Operation(method, tool, errorType, transport, version string, _ time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ops = append(d.ops, strings.Join([]string{method, tool, errorType, transport, version}, "|"))
}

func decide(t *testing.T, tr *proxy.Tracker, from proxy.Peer, raw string) proxy.Outcome {
	t.Helper()
	var f framing.Frame
	if err := f.Parse([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	return tr.Decide(from, &f.Msgs[0])
}

// TestTraceOverOTLP follows requests through a tracker to a real OTLP
// receiver, over HTTP and over gRPC: the span continues the client's
// trace, the server gets the proxy's span as its parent in _meta, a
// cancel is an event, and the durations carry the conventions' labels.
func TestTraceOverOTLP(t *testing.T) {
	for _, protocol := range []string{ProtocolHTTP, ProtocolGRPC} {
		t.Run(protocol, func(t *testing.T) {
			rcv := otlptest.StartHTTP(t)
			if protocol == ProtocolGRPC {
				rcv = otlptest.StartGRPC(t)
			}
			d := &durations{}
			tel, err := New(context.Background(), Config{Endpoint: rcv.URL, Protocol: protocol, ServiceName: "proxy-under-test", Version: "v0.0.1"}, d)
			if err != nil {
				t.Fatal(err)
			}
			tr := proxy.NewTracker(proxy.TrackerOptions{Tracer: tel.Session("pipe")})
			decide(t, tr, proxy.Client, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}`)
			decide(t, tr, proxy.Server, `{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25"}}`)
			o := decide(t, tr, proxy.Client, `{"jsonrpc":"2.0","id":"req-7","method":"tools/call","params":{"name":"slow","_meta":{"traceparent":"`+otlptest.ClientTraceParent+`","tracestate":"vendor=x"}}}`)
			var f framing.Frame
			if err := f.Parse(o.Rewritten); err != nil {
				t.Fatalf("forwarded %s: %v", o.Rewritten, err)
			}
			parent, state := f.Msgs[0].TraceContext()
			parts := strings.Split(parent, "-")
			if len(parts) != 4 || parts[1] != otlptest.ClientTrace || parts[2] == otlptest.ClientSpan || state != "vendor=x" || o.Trace.Parent != parent {
				t.Fatalf("forwarded trace context %q %q (outcome %+v)", parent, state, o.Trace)
			}
			decide(t, tr, proxy.Client, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"req-7","reason":"user stop"}}`)
			decide(t, tr, proxy.Client, `{"jsonrpc":"2.0","id":8,"method":"tools/list"}`)
			decide(t, tr, proxy.Server, `{"jsonrpc":"2.0","id":8,"error":{"code":-32602,"message":"bad cursor"}}`)
			if err := tel.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			call := rcv.Wait(t, 10*time.Second, "tools/call slow", func(s otlptest.Span) bool { return s.Name == "tools/call slow" })
			if call.TraceID != otlptest.ClientTrace || call.ParentID != otlptest.ClientSpan || call.SpanID != parts[2] {
				t.Errorf("span ids: trace %s parent %s span %s; forwarded %s", call.TraceID, call.ParentID, call.SpanID, parent)
			}
			want := map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "slow", "gen_ai.operation.name": "execute_tool",
				"jsonrpc.request.id": "req-7", "network.transport": "pipe", "mcp.protocol.version": "2025-11-25",
				proxy.AttrOutcome: "cancelled by the client"}
			for k, v := range want {
				if call.Attrs[k] != v {
					t.Errorf("attribute %s = %q, want %q", k, call.Attrs[k], v)
				}
			}
			if !call.HasEvent(proxy.EventCancelAccepted) || call.Events[0].Attrs[proxy.AttrSource] != "client" || call.Events[0].Attrs[proxy.AttrReason] != "user stop" {
				t.Errorf("events %+v", call.Events)
			}
			if call.Service != "proxy-under-test" || call.Error {
				t.Errorf("service %q, error %v", call.Service, call.Error)
			}
			list := rcv.Wait(t, 10*time.Second, "tools/list", func(s otlptest.Span) bool { return s.Name == "tools/list" })
			if !list.Error || list.Status != "bad cursor" || list.Attrs["error.type"] != "-32602" || list.ParentID != "" {
				t.Errorf("tools/list span: error %v %q attrs %v parent %q", list.Error, list.Status, list.Attrs, list.ParentID)
			}
			d.mu.Lock()
			defer d.mu.Unlock()
			wantOps := []string{"initialize|||pipe|2025-11-25", "tools/call|slow|cancelled|pipe|2025-11-25", "tools/list||-32602|pipe|2025-11-25"}
			if strings.Join(d.ops, ",") != strings.Join(wantOps, ",") {
				t.Errorf("durations %q, want %q", d.ops, wantOps)
			}
		})
	}
}

// BenchmarkTracedCall measures what tracing adds to a request and its
// answer through the tracker: off (no tracer), durations only, and spans
// exported (batched) to a receiver, with the client's trace context in
// _meta.
func BenchmarkTracedCall(b *testing.B) {
	rcv := otlptest.StartHTTP(b)
	spans, err := New(context.Background(), Config{Endpoint: rcv.URL}, &durations{})
	if err != nil {
		b.Fatal(err)
	}
	defer spans.Shutdown(context.Background())
	only, _ := New(context.Background(), Config{}, noDurations{})
	for _, c := range []struct {
		name   string
		tracer proxy.Tracer
	}{{"off", nil}, {"durations", only.Session("pipe")}, {"spans", spans.Session("pipe")}} {
		b.Run(c.name, func(b *testing.B) {
			tr := proxy.NewTracker(proxy.TrackerOptions{Tracer: c.tracer})
			var req, resp framing.Frame
			req.Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","arguments":{"a":1},"_meta":{"progressToken":"p","traceparent":"` + otlptest.ClientTraceParent + `"}}}`))
			resp.Parse([]byte(`{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`))
			b.ReportAllocs()
			for b.Loop() {
				tr.Decide(proxy.Client, &req.Msgs[0])
				tr.Decide(proxy.Server, &resp.Msgs[0])
			}
		})
	}
}

type noDurations struct{}

func (noDurations) Operation(string, string, string, string, string, time.Duration) {}

// TestCancelEndsTheDuration: a cancelled request's duration is recorded at
// its cancel, once, not when its story ends (after the late window, say).
func TestCancelEndsTheDuration(t *testing.T) {
	d := &durations{}
	tel, err := New(context.Background(), Config{}, d)
	if err != nil {
		t.Fatal(err)
	}
	var f framing.Frame
	f.Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow"}}`))
	sp := tel.Session("tcp").Start(proxy.Client, &f.Msgs[0], proxy.TraceContext{})
	sp.Event(proxy.EventCancelAccepted)
	d.mu.Lock()
	got := strings.Join(d.ops, ",")
	d.mu.Unlock()
	if got != "tools/call|slow|cancelled|tcp|" {
		t.Fatalf("durations after the cancel: %q", got)
	}
	sp.End("upstream notified; stop not confirmed", true)
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.ops) != 1 {
		t.Errorf("durations after the story's end: %q", d.ops)
	}
}

package proxy

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

const testParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// fakeTracer gives every request a span that records its events and end.
type fakeTracer struct{ spans []*fakeSpan }

func (f *fakeTracer) Start(_ Peer, m *framing.Message, _ TraceContext) Span {
	s := &fakeSpan{name: m.Method}
	f.spans = append(f.spans, s)
	return s
}

type fakeSpan struct {
	noSpan
	name    string
	events  []string
	outcome string
	ends    int
}

func (s *fakeSpan) Event(name string, _ ...Attr) { s.events = append(s.events, name) }
func (s *fakeSpan) End(outcome string, _ bool)   { s.outcome, s.ends = outcome, s.ends+1 }
func (s *fakeSpan) Answered(*framing.Message, int, string) {
	s.outcome, s.ends = "answered", s.ends+1
}
func (s *fakeSpan) Context() TraceContext { return TraceContext{Parent: testParent} }

func decide(t *testing.T, tr *Tracker, from Peer, raw string) Outcome {
	t.Helper()
	var f framing.Frame
	if err := f.Parse([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	return tr.Decide(from, &f.Msgs[0])
}

// TestTracedRequests: a traced request goes with its span's trace context
// in _meta, a renamed one too; the cancel, the late answer and suppressed
// progress are events; without a governor the span ends at the cancel.
func TestTracedRequests(t *testing.T) {
	ft := &fakeTracer{}
	tr := NewTracker(TrackerOptions{Tracer: ft})
	decide(t, tr, Client, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","_meta":{"progressToken":"p"}}}`)
	decide(t, tr, Client, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
	// Id 1 again while the cancelled one's late answer may come: renamed.
	o := decide(t, tr, Client, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"b"}}`)
	var sent struct {
		ID     any `json:"id"`
		Params struct {
			Name string            `json:"name"`
			Meta map[string]string `json:"_meta"`
		} `json:"params"`
	}
	if err := json.Unmarshal(o.Rewritten, &sent); err != nil || sent.ID == 1.0 || sent.Params.Name != "b" || sent.Params.Meta["traceparent"] != testParent {
		t.Fatalf("renamed traced request sent as %s (%v)", o.Rewritten, err)
	}
	decide(t, tr, Server, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1}}`)
	decide(t, tr, Server, `{"jsonrpc":"2.0","id":1,"result":{}}`) // the first one's late answer
	first := ft.spans[0]
	if want := []string{EventCancelAccepted, EventProgressDropped, EventLateSuppressed}; !slices.Equal(first.events, want) {
		t.Errorf("events %q, want %q", first.events, want)
	}
	if first.outcome != "cancelled by the client" || first.ends != 1 {
		t.Errorf("first span ended %d times, %q", first.ends, first.outcome)
	}
	if ft.spans[1].ends != 0 {
		t.Errorf("the second request's span ended before its answer: %q", ft.spans[1].outcome)
	}
}

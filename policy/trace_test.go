package policy

import (
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// recSpan records what a span is told; ended gets each span's end.
type recSpan struct {
	name     string
	ended    chan *recSpan
	mu       sync.Mutex
	events   []string
	children []*recSpan
	attrs    map[string]string
	outcome  string
	failed   bool
	done     bool
}

func (s *recSpan) Start(_ proxy.Peer, m *framing.Message, _ proxy.TraceContext) proxy.Span {
	return &recSpan{name: m.Method, ended: s.ended, attrs: map[string]string{}}
}

func (s *recSpan) Event(name string, _ ...proxy.Attr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, name)
}

func (s *recSpan) Child(name string, _ ...proxy.Attr) proxy.Span {
	c := &recSpan{name: name, ended: s.ended, attrs: map[string]string{}}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.children = append(s.children, c)
	return c
}

func (s *recSpan) Set(attrs ...proxy.Attr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range attrs {
		s.attrs[a.Key] = a.String()
	}
}

func (s *recSpan) Answered(*framing.Message, int, string) { s.End("answered", false) }

// End ends the span once, as OpenTelemetry's do: later ends change nothing.
func (s *recSpan) End(outcome string, failed bool) {
	s.mu.Lock()
	if s.done {
		s.mu.Unlock()
		return
	}
	s.outcome, s.failed, s.done = outcome, failed, true
	s.mu.Unlock()
	s.ended <- s
}

func (s *recSpan) Context() proxy.TraceContext { return proxy.TraceContext{} }

// tracedTransport is newTransport with a tracer whose spans go to ended
// as they end.
func tracedTransport(t *testing.T, e *Engine) (*fakeTransport, chan *recSpan) {
	ended := make(chan *recSpan, 8)
	ft := &fakeTransport{t: t, acts: make(chan action, 64)}
	ft.gov = e.Governor("s1")(ft)
	ft.tr = proxy.NewTracker(proxy.TrackerOptions{Logger: zaptest.NewLogger(t), Governor: ft.gov, Tracer: &recSpan{ended: ended}})
	return ft, ended
}

// tasksCancelDeclared initializes a session whose server declares
// tasks.cancel.
func tasksCancelDeclared(ft *fakeTransport, ended chan *recSpan) {
	ft.client(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}`)
	ft.server(result(0, `{"capabilities":{"tasks":{"cancel":{}}}}`))
	<-ended // initialize's
}

// TestSpanFollowsTheStory: a request's span gets the deadline and the
// cancel as events and the restart as a child, and ends with the audit
// line, its status the outcome, an error when the stop is not confirmed.
func TestSpanFollowsTheStory(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "render", Escalate: "restart", Timeout: dur(time.Minute)}}
	e, clk, recs := engine(t, p)
	ft, ended := tracedTransport(t, e)
	ft.restart = true
	ft.client(call(1, "render", ""))
	clk.Advance(time.Minute)
	if a := ft.next(); a.kind != "expire" {
		t.Fatalf("action %s, want expire", a.kind)
	}
	clk.Advance(p.RestartAfter)
	if a := ft.next(); a.kind != "restart" {
		t.Fatalf("action %s, want restart", a.kind)
	}
	restart := <-ended
	if restart.name != "restart" || restart.outcome != "server restarted" || restart.failed {
		t.Errorf("restart span %q: %q, failed %v", restart.name, restart.outcome, restart.failed)
	}
	clk.Advance(p.LateWindow)
	rec := waitRecord(t, recs)
	span := <-ended
	span.mu.Lock()
	defer span.mu.Unlock()
	if span.name != "tools/call" || span.outcome != rec.Status || rec.Status != StatusNotConfirmed || !span.failed {
		t.Errorf("span %q ended %q (failed %v); audit status %q", span.name, span.outcome, span.failed, rec.Status)
	}
	if want := []string{proxy.EventDeadline, proxy.EventCancelAccepted}; !slices.Equal(span.events, want) {
		t.Errorf("events %q, want %q", span.events, want)
	}
	if len(span.children) != 1 || span.children[0] != restart {
		t.Errorf("children %v", span.children)
	}
	if span.attrs[proxy.AttrOutcome] != rec.Status || span.attrs[proxy.AttrSource] != "deadline" {
		t.Errorf("attributes %v", span.attrs)
	}
}

// TestSpanOfACancelledTask: a request cancelled in flight whose late
// answer created a task gets tasks/cancel as an event, and its span ends
// with the audit line's word that the task was cancelled, not an error.
func TestSpanOfACancelledTask(t *testing.T) {
	watchdog(t, 30*time.Second)
	e, _, recs := engine(t, Defaults())
	ft, ended := tracedTransport(t, e)
	tasksCancelDeclared(ft, ended)
	ft.client(call(1, "research", `,"task":{}`))
	ft.client(cancel(1))
	ft.server(result(1, `{"task":{"taskId":"task-9","status":"working"}}`)) // late: suppressed, and its task cancelled
	a := ft.next()
	if a.kind != "own" {
		t.Fatalf("action %s, want tasks/cancel", a.kind)
	}
	a.onAnswer(&framing.Message{Raw: []byte(`{"jsonrpc":"2.0","id":"x","result":{"taskId":"task-9","status":"cancelled"}}`)})
	rec := waitRecord(t, recs)
	if child := <-ended; child.name != "tasks/cancel" {
		t.Fatalf("first span to end: %q, want tasks/cancel", child.name)
	}
	span := <-ended
	span.mu.Lock()
	defer span.mu.Unlock()
	if want := []string{proxy.EventCancelAccepted, proxy.EventLateSuppressed, proxy.EventTasksCancel}; !slices.Equal(span.events, want) {
		t.Errorf("events %q, want %q", span.events, want)
	}
	if rec.Status != StatusTaskCancelled || span.outcome != rec.Status || span.failed || span.attrs["mcp_cancel_proxy.task.id"] != "task-9" {
		t.Errorf("span ended %q (failed %v, attrs %v); audit %q", span.outcome, span.failed, span.attrs, rec.Status)
	}
	if len(span.children) != 1 || span.children[0].name != "tasks/cancel" || span.children[0].outcome != "cancelled" {
		t.Errorf("tasks/cancel span: %+v", span.children)
	}
}

// TestSpanOfATaskCancelledAfterItsAnswer: the request's span ended with
// the answer that created the task; the proxy's tasks/cancel, sent for a
// cancel that came later, is a span of its own under it.
func TestSpanOfATaskCancelledAfterItsAnswer(t *testing.T) {
	watchdog(t, 30*time.Second)
	e, _, recs := engine(t, Defaults())
	ft, ended := tracedTransport(t, e)
	tasksCancelDeclared(ft, ended)
	ft.client(call(1, "research", `,"task":{}`))
	ft.server(result(1, `{"task":{"taskId":"task-9","status":"working"}}`))
	call := <-ended
	ft.client(cancel(1))
	a := ft.next()
	if a.kind != "own" {
		t.Fatalf("action %s, want tasks/cancel", a.kind)
	}
	a.onAnswer(&framing.Message{IsError: true, Raw: []byte(`{"jsonrpc":"2.0","id":"x","error":{"code":-32602,"message":"task already completed"}}`)})
	waitRecord(t, recs)
	task := <-ended
	call.mu.Lock()
	defer call.mu.Unlock()
	if call.outcome != "answered" || len(call.children) != 1 || call.children[0] != task {
		t.Fatalf("request span %q with children %v", call.outcome, call.children)
	}
	if task.name != "tasks/cancel" || task.outcome != "refused: task already completed" || !task.failed {
		t.Errorf("tasks/cancel span %q ended %q (failed %v)", task.name, task.outcome, task.failed)
	}
}

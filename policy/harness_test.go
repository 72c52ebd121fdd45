package policy

import (
	"fmt"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
)

func watchdog(t testing.TB, d time.Duration) {
	tm := time.AfterFunc(d, func() {
		debug.SetTraceback("all")
		panic("test " + t.Name() + " hung")
	})
	t.Cleanup(func() { tm.Stop() })
}

// action is one thing the governor asked of the fake transport.
type action struct {
	kind     string // expire, dispatch, own, restart
	call     *proxy.Call
	cancel   []byte // expire: the cancel for the server
	reply    []byte // expire: the answer for the client
	frame    []byte // own: the request for the server
	reason   string
	source   proxy.Source // expire
	onAnswer func(*framing.Message)
}

// fakeTransport is a transport without I/O: a Tracker with the governor,
// and a record of what the governor asked for.
type fakeTransport struct {
	t       *testing.T
	tr      *proxy.Tracker
	gov     proxy.Governor
	mu      sync.Mutex // stands for the client relay
	acts    chan action
	restart bool // what Restart answers
	// principal, when set, makes the session several clients': it says
	// whose each request is (Actions.Principal).
	principal func(*proxy.Call) string
	owner     func(*proxy.Call) (principal, peer string)
	// unsent: the proxy's own requests are never sent before their cancel
	// (CancelOwn withdraws them).
	unsent bool
	// afterOwn, if set, runs once as SendOwn returns: what the client does
	// while the governor sends a request of its own. Set before the
	// request that leads to it.
	afterOwn func()
	// ownSent, if set, runs as SendOwn sends each request of the
	// governor's own, before it returns: a server that answers at once.
	ownSent func(*proxy.Call)
	// ownCancelled, if set, runs as CancelOwn returns: what the client does
	// while the governor cancels a request of its own.
	ownCancelled func(*proxy.Call)
}

func newTransport(t *testing.T, e *Engine) *fakeTransport { return transportOf(t, e, "s1", nil) }

// transportOf is a fake transport of the session named, whose requests'
// principal is said by principal (nil: the session is one client's).
func transportOf(t *testing.T, e *Engine, session string, principal func(*proxy.Call) string) *fakeTransport {
	ft := &fakeTransport{t: t, acts: make(chan action, 64), principal: principal}
	ft.gov = e.Governor(session)(ft)
	ft.tr = proxy.NewTracker(proxy.TrackerOptions{Logger: zaptest.NewLogger(t), Governor: ft.gov})
	return ft
}

func (ft *fakeTransport) Expire(c *proxy.Call, source proxy.Source, reason string, reply []byte) {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	cancel := ft.tr.CancelCall(c, source, reason)
	ft.acts <- action{kind: "expire", call: c, cancel: cancel, reply: reply, reason: reason, source: source}
}

func (ft *fakeTransport) Dispatch(c *proxy.Call) { ft.acts <- action{kind: "dispatch", call: c} }

func (ft *fakeTransport) SendOwn(method string, params []byte, progress framing.ID, onAnswer func(*framing.Message)) *proxy.Call {
	c, frame := ft.tr.OwnCall(method, params, progress, onAnswer)
	ft.acts <- action{kind: "own", call: c, frame: frame, onAnswer: onAnswer}
	if ft.ownSent != nil {
		ft.ownSent(c)
	}
	if f := ft.afterOwn; f != nil {
		ft.afterOwn = nil
		f()
	}
	return c
}

func (ft *fakeTransport) CancelOwn(c *proxy.Call, source proxy.Source, reason string) {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	cancel := ft.tr.CancelOwn(c, source, reason)
	if cancel != nil && ft.unsent {
		ft.tr.WithdrawOwn(c) // its POST is cut before a byte of it went, as the HTTP front's is
	}
	ft.acts <- action{kind: "cancel-own", call: c, cancel: cancel, source: source, reason: reason}
	if f := ft.ownCancelled; f != nil {
		ft.mu.Unlock() // the client's message takes the lock
		f(c)
		ft.mu.Lock()
	}
}

func (ft *fakeTransport) Serve(c *proxy.Call, reply []byte) bool {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	ft.tr.Served(c)
	ft.acts <- action{kind: "serve", call: c, reply: reply}
	return true
}

func (ft *fakeTransport) Restart(reason string) bool {
	ft.acts <- action{kind: "restart", reason: reason}
	return ft.restart
}

func (ft *fakeTransport) Answer(c *proxy.Call, reply []byte) bool {
	ft.acts <- action{kind: "answer", call: c, reply: reply}
	return true
}

func (ft *fakeTransport) Notify(c *proxy.Call, frame []byte) {
	ft.acts <- action{kind: "notify", call: c, frame: frame}
}

func (ft *fakeTransport) ReleaseCancel(c *proxy.Call, send bool) {
	ft.acts <- action{kind: map[bool]string{true: "send-cancel", false: "forget-cancel"}[send], call: c}
}

func (ft *fakeTransport) DefersCancels() bool { return true }

func (ft *fakeTransport) Principal(c *proxy.Call) (string, bool) {
	if ft.principal == nil {
		return "", false
	}
	return ft.principal(c), true
}

func (ft *fakeTransport) Owner(c *proxy.Call) (string, string) {
	if ft.owner == nil {
		return "", ""
	}
	return ft.owner(c)
}

func (ft *fakeTransport) After(f func()) {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	f()
}

// from decides one message from a peer, as a relay would.
func (ft *fakeTransport) from(p proxy.Peer, msg string) proxy.Outcome {
	ft.t.Helper()
	ft.mu.Lock()
	defer ft.mu.Unlock()
	var f framing.Frame
	if err := f.Parse([]byte(msg)); err != nil {
		ft.t.Fatalf("parse %s: %v", msg, err)
	}
	return ft.tr.Decide(p, &f.Msgs[0])
}

func (ft *fakeTransport) client(msg string) proxy.Outcome { return ft.from(proxy.Client, msg) }
func (ft *fakeTransport) server(msg string) proxy.Outcome { return ft.from(proxy.Server, msg) }

// withdraw stands for a relay finding a cancelled request still held.
func (ft *fakeTransport) withdraw(c *proxy.Call) {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	ft.tr.Withdraw(proxy.Client, c)
}

// next returns the next action, failing the test after a while without one.
func (ft *fakeTransport) next() action {
	ft.t.Helper()
	select {
	case a := <-ft.acts:
		return a
	case <-time.After(10 * time.Second):
		ft.t.Fatal("no action from the governor")
		return action{}
	}
}

// none checks that the governor asked nothing: once its work goroutine has
// run everything posted so far (an idle signal, not a window), no action
// may be waiting.
func (ft *fakeTransport) none() {
	ft.t.Helper()
	select {
	case <-ft.gov.(*governor).work.barrier():
	case <-time.After(10 * time.Second):
		ft.t.Fatal("the governor's work goroutine never got through its queue")
	}
	select {
	case a := <-ft.acts:
		ft.t.Fatalf("unexpected action %s", a.kind)
	default:
	}
}

// barrier returns a channel closed once everything posted to q before it
// has run (at once if q is closed: nothing more runs).
func (q *workQueue) barrier() <-chan struct{} {
	done := make(chan struct{})
	q.mu.Lock()
	closed := q.closed
	q.mu.Unlock()
	if closed {
		close(done)
		return done
	}
	q.post(func() { close(done) })
	return done
}

func call(id int, tool string, extra string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{"n":%d}%s}}`, id, tool, id, extra)
}

func cancel(id int) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d,"reason":"user stop"}}`, id)
}

func result(id int, body string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":%s}`, id, body)
}

func progress(tok string, n int, msg string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":%q,"progress":%d,"message":%q}}`, tok, n, msg)
}

// engine starts an Engine for p with a fake clock; audit records come on
// the returned channel.
func engine(t *testing.T, p Policy) (*Engine, *clock.Fake, <-chan *Record) {
	t.Helper()
	if err := p.Validate("policy"); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	recs := make(chan *Record, 16)
	e, err := New(Options{Policy: p, Audit: Audit{Path: "off"}, Logger: zaptest.NewLogger(t), Clock: clk,
		OnAudit: func(r *Record) { recs <- r }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	return e, clk, recs
}

func waitRecord(t *testing.T, recs <-chan *Record) *Record {
	t.Helper()
	select {
	case r := <-recs:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no audit record")
		return nil
	}
}

func dur(d time.Duration) *time.Duration { return &d }

func yes() *bool { b := true; return &b }

package stdio_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
)

// holdingGovernor holds every tools/call and reports what it is told.
type holdingGovernor struct {
	act       proxy.Actions
	mu        sync.Mutex
	held      []*proxy.Call
	withdrawn chan *proxy.Call
	cancelled chan string
}

func (g *holdingGovernor) Admit(c *proxy.Call, m *framing.Message) proxy.Admission {
	if m.Method != "tools/call" {
		return proxy.Admission{}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.held = append(g.held, c)
	return proxy.Admission{Hold: true}
}
func (g *holdingGovernor) Observe(ev proxy.Change) {
	switch ev.Kind {
	case proxy.ChangeCancelled:
		g.cancelled <- string(ev.Source)
	case proxy.ChangeWithdrawn:
		g.withdrawn <- ev.Call
	}
}
func (g *holdingGovernor) Close() {}

// TestSessionHoldsRequestsForTheGovernor: a held request reaches the
// server only when dispatched; one cancelled while held never does, and
// neither does its cancel; a deadline answers the client and cancels the
// request on the server.
func TestSessionHoldsRequestsForTheGovernor(t *testing.T) {
	g := &holdingGovernor{withdrawn: make(chan *proxy.Call, 4), cancelled: make(chan string, 4)}
	h := newHarness(t, stdio.Options{Governor: func(a proxy.Actions) proxy.Governor { g.act = a; return g }})
	h.client(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}`)
	h.client(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"b"}}`)
	h.client(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
	if c := <-g.withdrawn; c.ID() != framing.IntID(1) {
		t.Fatalf("withdrawn %v, want 1", c.ID())
	}
	h.client(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	h.serverGetsExactly(`{"jsonrpc":"2.0","id":3,"method":"ping"}`) // nothing of 1, nor of 2 yet
	g.mu.Lock()
	second := g.held[1]
	g.mu.Unlock()
	g.act.Dispatch(second)
	h.serverGetsExactly(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"b"}}`)
	g.act.Expire(second, proxy.SourceDeadline, "deadline of 1s passed", proxy.DeadlineReply(second.ID(), "1s"))
	h.serverGets(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"deadline of 1s passed"}}`)
	h.clientGets(`{"jsonrpc":"2.0","id":2,"error":{"code":-32001,"message":"Request timed out: the proxy's deadline of 1s passed","data":{"proxy":"mcp-cancel-proxy","reason":"deadline","timeout":"1s"}}}`)
	if src := <-g.cancelled; src != "client" {
		t.Errorf("first cancel's source %q", src)
	}
	if src := <-g.cancelled; src != "deadline" {
		t.Errorf("second cancel's source %q", src)
	}
	h.server(`{"jsonrpc":"2.0","id":2,"result":{}}`) // late: suppressed
	h.client(`{"jsonrpc":"2.0","id":4,"method":"ping"}`)
	h.serverGetsExactly(`{"jsonrpc":"2.0","id":4,"method":"ping"}`) // answered only once received: else a race
	h.server(`{"jsonrpc":"2.0","id":4,"result":{}}`)
	h.clientGetsExactly(`{"jsonrpc":"2.0","id":4,"result":{}}`)
}

// TestHeldRequestAnsweredAtShutdownOverStdio: the wrapper's side of
// httpx's TestHeldRequestAnsweredAtShutdown: CancelAll withdraws a held
// request (never sent, nor its cancel) and answers it -32000, as it cancels
// and answers a running one.
func TestHeldRequestAnsweredAtShutdownOverStdio(t *testing.T) {
	g := &holdingGovernor{withdrawn: make(chan *proxy.Call, 4), cancelled: make(chan string, 4)}
	h := newHarness(t, stdio.Options{Governor: func(a proxy.Actions) proxy.Governor { g.act = a; return g }})
	h.client(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}`)
	h.client(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"b"}}`)
	h.client(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	h.serverGetsExactly(`{"jsonrpc":"2.0","id":3,"method":"ping"}`) // 1 and 2 decided and held
	g.mu.Lock()
	first := g.held[0]
	g.mu.Unlock()
	g.act.Dispatch(first)
	h.serverGetsExactly(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}`)
	if n := h.sess.CancelAll(proxy.SourceShutdown, "the proxy is shutting down"); n != 3 {
		t.Errorf("CancelAll cancelled %d, want 3 (the running call, the held one, the ping)", n)
	}
	if c := <-g.withdrawn; c.ID() != framing.IntID(2) {
		t.Errorf("withdrawn %v, want 2", c.ID())
	}
	var answered, told []string // in no particular order
	for range 3 {
		answered = append(answered, string(next(t, h.fromProxyC, "client")))
	}
	for range 2 {
		told = append(told, string(next(t, h.fromProxyS, "server")))
	}
	slices.Sort(answered)
	slices.Sort(told)
	var want []string
	for _, id := range []string{"1", "2", "3"} {
		want = append(want, `{"jsonrpc":"2.0","id":`+id+`,"error":{"code":-32000,"message":"the proxy is shutting down","data":{"proxy":"mcp-cancel-proxy"}}}`)
	}
	if !slices.Equal(answered, want) {
		t.Errorf("the client got %q, want %q", answered, want)
	}
	if want := []string{`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"the proxy is shutting down"}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3,"reason":"the proxy is shutting down"}}`}; !slices.Equal(told, want) {
		t.Errorf("the server got %q, want %q", told, want)
	}
	h.client(`{"jsonrpc":"2.0","id":4,"method":"ping"}`)
	h.serverGetsExactly(`{"jsonrpc":"2.0","id":4,"method":"ping"}`) // nothing of 2, nor its cancel
}

// TestHeldRequestCancelledInABatch: a cancel inside a batch (2025-03-26)
// withdraws a held request as a lone one does: the batch goes on without
// it, and the request never reaches the server.
func TestHeldRequestCancelledInABatch(t *testing.T) {
	g := &holdingGovernor{withdrawn: make(chan *proxy.Call, 4), cancelled: make(chan string, 4)}
	h := newHarness(t, stdio.Options{Governor: func(a proxy.Actions) proxy.Governor { g.act = a; return g }})
	h.client(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}`)
	h.client(`[{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}},{"jsonrpc":"2.0","id":2,"method":"ping"}]`)
	if c := <-g.withdrawn; c.ID() != framing.IntID(1) {
		t.Fatalf("withdrawn %v, want 1", c.ID())
	}
	h.serverGetsExactly(`[{"jsonrpc":"2.0","id":2,"method":"ping"}]`)
	if st := h.sess.Stats(); st.Withdrawn != 1 {
		t.Errorf("withdrawn = %d, want 1", st.Withdrawn)
	}
}

// writtenFirstGovernor admits every request and, told of a client's
// cancel, checks that the cancel had already reached the server.
type writtenFirstGovernor struct {
	written chan struct{} // closed by the test once the server has the cancel
	early   chan bool     // whether the governor heard of the cancel before that
}

func (g *writtenFirstGovernor) Admit(*proxy.Call, *framing.Message) proxy.Admission {
	return proxy.Admission{}
}
func (g *writtenFirstGovernor) Observe(ev proxy.Change) {
	if ev.Kind != proxy.ChangeCancelled {
		return
	}
	select {
	case <-g.written:
		g.early <- false
	case <-time.After(5 * time.Second): // a bound, not a wait for order: the cancel is held behind this call
		g.early <- true
	}
}
func (g *writtenFirstGovernor) Close() {}

// TestCancelWrittenBeforeTheGovernorHears: the wrapper writes a client's
// cancel of a request already sent to the server before it tells the
// governor (and the events feed), whose work wakes other threads: on two
// cores that cost the cancel half again the time of a plain notification
// (bench/cancel). Before, the governor heard first, and the cancel waited
// for it.
func TestCancelWrittenBeforeTheGovernorHears(t *testing.T) {
	g := &writtenFirstGovernor{written: make(chan struct{}), early: make(chan bool, 1)}
	h := newHarness(t, stdio.Options{Governor: func(proxy.Actions) proxy.Governor { return g }})
	h.client(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}`)
	h.serverGetsExactly(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}`)
	h.client(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
	h.serverGetsExactly(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
	close(g.written)
	if <-g.early {
		t.Error("the governor heard of the cancel before the server got it")
	}
}

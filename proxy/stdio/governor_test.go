package stdio_test

import (
	"sync"
	"testing"

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
	g.act.Expire(second, "deadline of 1s passed", proxy.DeadlineReply(second.ID(), "1s"))
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

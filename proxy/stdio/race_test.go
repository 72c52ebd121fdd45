package stdio_test

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
)

// TestCompleteVersusCancelRace drives thousands of requests whose response
// and cancel cross in the proxy. For every request the server saw, exactly
// one side must win: either the client got the response and the server never
// got the cancel, or the server got the cancel and the client never got the
// response. A request cancelled while still queued in the proxy is never
// sent, and then neither is its cancel. Nothing may be lost, and nothing may
// be delivered twice. Run it under -race.
func TestCompleteVersusCancelRace(t *testing.T) {
	const n = 3000
	h := newHarness(t, stdio.Options{})
	var wg sync.WaitGroup
	responses := make(map[int]int)
	cancels := make(map[int]int)
	requests := make(map[int]int)

	wg.Add(3)
	go func() { // the server answers every request as soon as it sees it
		defer wg.Done()
		defer h.toProxyS.Close()
		for {
			f, err := h.fromProxyS.r.Read(nil)
			if err != nil {
				return
			}
			var m struct {
				ID     *int
				Method string
				Params struct{ RequestID int }
			}
			if err := json.Unmarshal(f, &m); err != nil {
				t.Errorf("server got %s: %v", f, err)
				return
			}
			if m.Method == framing.MethodCancelled {
				cancels[m.Params.RequestID]++
				continue
			}
			requests[*m.ID]++
			fmt.Fprintf(h.toProxyS, `{"jsonrpc":"2.0","id":%d,"result":{}}`+"\n", *m.ID)
		}
	}()
	go func() { // the client cancels each request a little after sending it
		defer wg.Done()
		defer h.toProxyC.Close()
		const lag = 3
		for i := 0; i < n+lag; i++ {
			if i < n {
				fmt.Fprintf(h.toProxyC, `{"jsonrpc":"2.0","id":%d,"method":"tools/call"}`+"\n", i)
			}
			if j := i - lag; j >= 0 {
				fmt.Fprintf(h.toProxyC, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}`+"\n", j)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for {
			f, err := h.fromProxyC.r.Read(nil)
			if err == io.EOF {
				return
			} else if err != nil {
				t.Errorf("client read: %v", err)
				return
			}
			var m struct{ ID int }
			json.Unmarshal(f, &m)
			responses[m.ID]++
		}
	}()
	wg.Wait()
	h.wait()

	both, neither, unsent := 0, 0, 0
	for i := range n {
		q, r, c := requests[i], responses[i], cancels[i]
		if q > 1 || r > 1 || c > 1 {
			t.Fatalf("id %d: delivered %d times, %d responses and %d cancels", i, q, r, c)
		}
		switch {
		case q == 0 && r+c > 0:
			t.Fatalf("id %d was never sent, yet %d responses and %d cancels were delivered", i, r, c)
		case q == 0:
			unsent++
		case r+c == 2:
			both++
		case r+c == 0:
			neither++
		}
	}
	st := h.sess.Stats()
	t.Logf("%d requests: %d responses won, %d cancels won, %d withdrawn unsent; stats %+v",
		n, len(responses), len(cancels), unsent, st)
	if both > 0 || neither > 0 {
		t.Fatalf("%d ids got both a response and a forwarded cancel, %d sent ones got neither", both, neither)
	}
	if int64(unsent) != st.Withdrawn {
		t.Errorf("%d requests never reached the server, but %d were withdrawn", unsent, st.Withdrawn)
	}
	if int(st.CancelsForwarded)+int(st.CancelsDropped) != n { // accepted ones include the withdrawn
		t.Errorf("cancels forwarded %d + dropped %d != %d", st.CancelsForwarded, st.CancelsDropped, n)
	}
}

// TestCancelTakesEffectWhileServerInputIsBlocked shows that a cancel is
// acted on when it is read, not when the server gets round to reading it: the
// server reads nothing, yet its answer to the cancelled request is suppressed.
func TestCancelTakesEffectWhileServerInputIsBlocked(t *testing.T) {
	events := make(chan proxy.Event, 16)
	h := newHarness(t, stdio.Options{OnEvent: func(e proxy.Event) {
		if e.Action == proxy.ActCancelAccepted {
			events <- e
		}
	}})
	h.client(callTool)
	h.serverGets(callTool)
	h.client(cancel1) // nobody reads the server's input now
	select {
	case e := <-events:
		if e.ID != framing.IntID(1) {
			t.Fatalf("cancel accepted for %v, want 1", e.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("cancel not accepted while the server's input was not being read")
	}
	h.server(result1)
	h.server(`{"jsonrpc":"2.0","method":"notifications/marker"}`)
	h.clientGets(`{"jsonrpc":"2.0","method":"notifications/marker"}`)
	h.serverGets(cancel1)
}

// gatedWriter holds every Write until the test releases it, announcing the
// first on started (which has room for one).
type gatedWriter struct {
	io.WriteCloser
	started chan struct{}
	release chan struct{}
}

func (g *gatedWriter) Write(p []byte) (int, error) {
	select {
	case g.started <- struct{}{}:
	default:
	}
	<-g.release
	return g.WriteCloser.Write(p)
}

// TestCancelNeverWaitsBehindQueuedFrames: while the proxy is stuck writing
// request 1 to a server that is not reading, the client queues request 2
// and a ping, then cancels 2 and 1. Request 2, still queued, is withdrawn:
// neither it nor its cancel is ever sent. The cancel of 1, whose request is
// already on the wire, goes ahead of the queued ping.
func TestCancelNeverWaitsBehindQueuedFrames(t *testing.T) {
	accepted := make(chan proxy.Event, 8)
	gate := &gatedWriter{started: make(chan struct{}, 1), release: make(chan struct{})}
	h := newHarnessWith(t, stdio.Options{OnEvent: func(e proxy.Event) {
		if e.Action == proxy.ActCancelAccepted || e.Action == proxy.ActWithdrawn {
			accepted <- e
		}
	}}, func(w io.WriteCloser) io.WriteCloser { gate.WriteCloser = w; return gate })

	h.client(`{"jsonrpc":"2.0","id":1,"method":"tools/call"}`)
	<-gate.started // request 1 is being written
	h.client(`{"jsonrpc":"2.0","id":2,"method":"tools/call"}`)
	h.client(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	h.client(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`)
	h.client(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
	var got []string
	for range 3 {
		e := <-accepted
		got = append(got, fmt.Sprintf("%s %v", e.Action, e.ID))
	}
	if want := "[cancel accepted 2 withdrawn before dispatch 2 cancel accepted 1]"; fmt.Sprint(got) != want {
		t.Fatalf("events %v, want %s", got, want)
	}
	// The event comes as the cancel is decided, before its frame is
	// queued: a line the proxy answers itself, read after the cancel by
	// the same relay, says the cancel's frame is queued. (Released before
	// that, the writer could take the ping first.)
	h.client(`{"jsonrpc":"2.0","id":9,"method":`)
	if _, code, _ := errorOf(t, next(t, h.fromProxyC, "client")); code != -32700 {
		t.Fatalf("a malformed line: code %d, want -32700", code)
	}
	close(gate.release) // let every write through from now on
	h.serverGets(`{"jsonrpc":"2.0","id":1,"method":"tools/call"}`)
	h.serverGets(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
	h.serverGets(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	h.server(`{"jsonrpc":"2.0","id":3,"result":{}}`)
	h.clientGets(`{"jsonrpc":"2.0","id":3,"result":{}}`)
	if st := h.sess.Stats(); st.Withdrawn != 1 {
		t.Errorf("Withdrawn = %d, want 1", st.Withdrawn)
	}
}

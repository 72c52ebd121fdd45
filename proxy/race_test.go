package proxy_test

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// TestCompleteVersusCancelRace drives thousands of requests whose response
// and cancel cross in the proxy. For every id exactly one side must win:
// either the client got the response and the server never got the cancel, or
// the server got the cancel and the client never got the response. Nothing
// may be lost, and nothing may be delivered twice. Run it under -race.
func TestCompleteVersusCancelRace(t *testing.T) {
	const n = 3000
	h := newHarness(t, proxy.Options{})
	var wg sync.WaitGroup
	responses := make(map[int]int)
	cancels := make(map[int]int)

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

	both, neither := 0, 0
	for i := range n {
		r, c := responses[i], cancels[i]
		if r > 1 || c > 1 {
			t.Fatalf("id %d: %d responses and %d cancels delivered", i, r, c)
		}
		switch r + c {
		case 2:
			both++
		case 0:
			neither++
		}
	}
	st := h.sess.Stats()
	t.Logf("%d requests: %d responses won, %d cancels won; stats %+v", n, len(responses), len(cancels), st)
	if both > 0 || neither > 0 {
		t.Fatalf("%d ids got both a response and a forwarded cancel, %d got neither", both, neither)
	}
	if int(st.CancelsForwarded)+int(st.CancelsDropped) != n {
		t.Errorf("cancels forwarded %d + dropped %d != %d", st.CancelsForwarded, st.CancelsDropped, n)
	}
}

// TestCancelTakesEffectWhileServerInputIsBlocked shows that a cancel is
// acted on when it is read, not when the server gets round to reading it: the
// server reads nothing, yet its answer to the cancelled request is suppressed.
func TestCancelTakesEffectWhileServerInputIsBlocked(t *testing.T) {
	events := make(chan proxy.Event, 16)
	h := newHarness(t, proxy.Options{OnEvent: func(e proxy.Event) {
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

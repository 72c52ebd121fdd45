package httpx_test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/natstest"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/fleet"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
)

// TestFleetCancelFindsItsReplica: two sidecar replicas in front of one
// server, no session affinity. A client's call runs through replica A; its
// cancel, POSTed to replica B, which does not hold the request, is asked
// of the fleet (a real NATS server), accepted by A as if POSTed there: the
// server sees the cancel, and A's stream ends with no late answer; a
// DELETE sent to B has A cancel the session's call it holds. Without the
// fleet B drops the cancel, and the server never hears of it.
func TestFleetCancelFindsItsReplica(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	ns := natstest.Run(t, -1)
	up := newUpstream(t, &mcp.StreamableHTTPOptions{})
	sources := make(chan string, 16) // replica A's cancels, by source
	replica := func(withFleet bool, onCancel func(string)) string {
		sc := &httpx.Sidecar{Upstream: up.url, OnCancel: onCancel}
		if withFleet {
			q, err := fleet.Dial(fleet.Options{URL: ns.ClientURL(), Logger: zaptest.NewLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(q.Close)
			sc.Fleet = q
		}
		return serveSidecar(t, sc)
	}
	for _, withFleet := range []bool{true, false} {
		a, b := replica(withFleet, func(src string) { sources <- src }), replica(withFleet, nil)
		onA := &rawClient{t: t, url: a}
		onA.initialize()
		stream := events(onA.post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait_cancel","arguments":{"key":"far"},"_meta":{"progressToken":"tok"}}}`).Body)
		<-stream // progress: the call runs
		<-up.started
		onB := &rawClient{t: t, url: b, session: onA.session}
		onB.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"stop"}}`).Body.Close()
		if !withFleet {
			// B has answered the cancel's POST, so it has done with it; the
			// call then runs to its answer, which a cancel would have
			// stopped (the server answers no cancelled request).
			up.release <- struct{}{}
			answered := false
			for m := range stream {
				answered = answered || m["id"] != nil
			}
			if !answered {
				t.Error("without a fleet the call was not answered")
			}
			select {
			case key := <-up.sawCancel:
				t.Errorf("without a fleet the server saw a cancel of %q", key)
			default:
			}
			continue
		}
		if key := <-up.sawCancel; key != "far" {
			t.Errorf("server cancelled %q", key)
		}
		for m := range stream {
			if m["id"] != nil {
				t.Errorf("client got %v after its cancel", m)
			}
		}
		if src := <-sources; src != "client" {
			t.Errorf("replica A counted a cancel from %q, want client", src)
		}
		// A DELETE through B: A cancels upstream the session's call it holds.
		events(onA.post(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"wait_cancel","arguments":{"key":"deleted"}}}`).Body)
		<-up.started
		onB.end()
		if src := <-sources; src != "session_end" {
			t.Errorf("replica A counted a cancel from %q, want session_end", src)
		}
		if key := <-up.sawCancel; key != "deleted" {
			t.Errorf("server cancelled %q", key)
		}
	}
}

// TestFleetCancelLatency is a load driver, not a check: with
// MCP_FLEET_LATENCY=N it times N cancels from the client's POST to the
// server's seeing the cancel, POSTed to the replica that holds the call
// and to the other one (through the fleet), side by side, and logs the
// median and p99 of each.
//
//	MCP_FLEET_LATENCY=300 go test -run TestFleetCancelLatency -v ./proxy/httpx
func TestFleetCancelLatency(t *testing.T) {
	t.Parallel()
	n, _ := strconv.Atoi(os.Getenv("MCP_FLEET_LATENCY"))
	if n <= 0 {
		t.Skip("a load driver: set MCP_FLEET_LATENCY=N")
	}
	ns := natstest.Run(t, -1)
	up := newUpstream(t, &mcp.StreamableHTTPOptions{})
	replica := func() string {
		q, err := fleet.Dial(fleet.Options{URL: ns.ClientURL()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(q.Close)
		return serveSidecar(t, &httpx.Sidecar{Upstream: up.url, Fleet: q, Logger: zap.NewNop()})
	}
	a, b := replica(), replica()
	onA := &rawClient{t: t, url: a}
	onA.initialize()
	onB := &rawClient{t: t, url: b, session: onA.session}
	took := map[string][]time.Duration{}
	for i := range 2 * n {
		via, name := onA, "same replica"
		if i%2 == 1 {
			via, name = onB, "other replica (fleet)"
		}
		id := 10 + i
		stream := events(onA.post(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"wait_cancel","arguments":{"key":"k"}}}`, id)).Body)
		<-up.started
		start := time.Now()
		via.post(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}`, id)).Body.Close()
		<-up.sawCancel
		took[name] = append(took[name], time.Since(start))
		for range stream {
		}
	}
	for name, d := range took {
		slices.Sort(d)
		t.Logf("%-22s n=%d median %v p99 %v", name, len(d), d[len(d)/2], d[len(d)*99/100])
	}
}

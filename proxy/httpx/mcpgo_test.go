package httpx_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	mcpgoclient "github.com/mark3labs/mcp-go/client"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	feed "github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
)

// mcpgoCallAndAbandon connects mark3labs/mcp-go's client to url, calls
// wait_cancel, and abandons the call once it is running: mcp-go only closes
// the request's stream and never POSTs a cancel. The client stays open
// (closing it would DELETE the session, which cancels everything) until the
// test ends.
func mcpgoCallAndAbandon(t *testing.T, url string, running <-chan struct{}) {
	c, err := mcpgoclient.NewStreamableHttpClient(url)
	if err != nil {
		t.Fatal(err)
	}
	mcpgoAbandon(t, c, "mcpgo", running)
}

// mcpgoAbandon starts c, initializes, calls wait_cancel with key, and gives
// the call up once it is running (running receives); c is closed when the
// test ends.
func mcpgoAbandon(t *testing.T, c *mcpgoclient.Client, key string, running <-chan struct{}) {
	t.Helper()
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	init := mcpgo.InitializeRequest{}
	init.Params.ProtocolVersion = "2025-06-18"
	init.Params.ClientInfo = mcpgo.Implementation{Name: "mcp-go", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		t.Fatal(err)
	}
	callCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		req := mcpgo.CallToolRequest{}
		req.Params.Name = "wait_cancel"
		req.Params.Arguments = map[string]any{"key": key}
		_, err := c.CallTool(callCtx, req)
		done <- err
	}()
	<-running
	cancel()
	if err := <-done; err == nil {
		t.Error("CallTool returned no error after its context was cancelled")
	}
}

// TestMcpGoClientNeedsDisconnectGrace: mcp-go's client cancels by closing
// the stream only. With the opt-in grace, the sidecar cancels upstream on
// its behalf once the client has not come back in time.
func TestMcpGoClientNeedsDisconnectGrace(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up := newUpstream(t, &mcp.StreamableHTTPOptions{})
	clk := clock.NewFake(time.Now())
	url := serveSidecar(t, &httpx.Sidecar{Upstream: up.url, DisconnectCancelAfter: time.Minute, Clock: clk})
	mcpgoCallAndAbandon(t, url, up.started)
	// The sidecar saw the stream dropped once the grace runs: its timer,
	// not any other the session sets (a late event stream's).
	for armed := clk.Armed(); !clk.SetFor(time.Minute); armed = clk.Armed() {
		<-armed
	}
	select {
	case key := <-up.sawCancel:
		t.Fatalf("upstream cancelled %q before the grace passed", key)
	default:
	}
	clk.Advance(time.Minute)
	if key := <-up.sawCancel; key != "mcpgo" {
		t.Errorf("upstream cancelled %q", key)
	}
}

// TestDisconnectIsNotACancelByDefault: in the 2025 revisions a dropped
// stream is not a cancel, and without the opt-in the sidecar sends none.
// Proved without a window: the sidecar says, as a stream_left event, that
// it saw the client leave and lets the request run on (it decides that
// there, so a cancel it made of the close would come first); the session's
// end then cancels the request, and that is the first and only cancel.
func TestDisconnectIsNotACancelByDefault(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up := newUpstream(t, &mcp.StreamableHTTPOptions{})
	events, err := feed.Open("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { events.Close() })
	left := events.Subscribe(64)
	cancels := make(chan string, 4)
	url := serveSidecar(t, &httpx.Sidecar{Upstream: up.url, Logger: zap.New(events.Core()),
		OnCancel: func(source string) { cancels <- source }})
	c, err := mcpgoclient.NewStreamableHttpClient(url)
	if err != nil {
		t.Fatal(err)
	}
	mcpgoAbandon(t, c, "mcpgo", up.started)
	waitEvent(t, left, feed.StreamLeft, "then", "runs on")
	c.Close() // DELETE: the session ends, and its request with it
	if source := <-cancels; source != "session_end" {
		t.Errorf("the first cancel's source is %q, want session_end: the disconnect was taken for a cancel", source)
	}
	if key := <-up.sawCancel; key != "mcpgo" {
		t.Errorf("upstream cancelled %q", key)
	}
}

// waitEvent reads sub's events until one is named name with the fields kv
// (name, value pairs, as fmt.Sprint prints the values).
func waitEvent(t *testing.T, sub *feed.Subscription, name feed.Name, kv ...string) {
	t.Helper()
	for line := range sub.Lines() {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("an event that is not JSON: %s", line)
		}
		match := m[feed.Key] == string(name)
		for i := 0; match && i+1 < len(kv); i += 2 {
			match = fmt.Sprint(m[kv[i]]) == kv[i+1]
		}
		if match {
			return
		}
	}
	t.Fatalf("the feed ended before an event %s %v", name, kv)
}

// TestLegacyStopCancelsInFlight: mcp-go's HTTP+SSE client gives up on a
// call without telling anyone (it sends no cancel over HTTP, and the call
// has no stream of its own to close), so the call runs on upstream. When
// the sidecar stops, such calls of old clients are cancelled upstream, as
// the stdio servers' are, rather than left running: the upstream sees the
// cancel, and Cleanup returns though the upstream holds its answer to the
// session's DELETE until its calls end.
func TestLegacyStopCancelsInFlight(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up := newUpstream(t, &mcp.StreamableHTTPOptions{})
	sc := &httpx.Sidecar{Upstream: up.url, Legacy: &httpx.Legacy{}}
	base := strings.TrimSuffix(serveSidecar(t, sc), "/mcp")
	c, err := mcpgoclient.NewSSEMCPClient(base + "/sse")
	if err != nil {
		t.Fatal(err)
	}
	mcpgoAbandon(t, c, "sse", up.started)
	sc.Cleanup("the proxy is shutting down")
	if key := <-up.sawCancel; key != "sse" {
		t.Errorf("upstream cancelled %q", key)
	}
}

// TestMcpGoClientCancelsOnStatelessUpstream: mcp-go's Streamable HTTP
// client speaks 2025 and cancels only by closing the request's stream; in
// front of a stateless upstream it has no session, so nobody could resume
// that stream, and the sidecar, having found with server/discover that the
// upstream speaks 2026-07-28, sent the request as such: the close reaches
// the tool as its cancel, and the sidecar records it.
func TestMcpGoClientCancelsOnStatelessUpstream(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up := newUpstream(t, &mcp.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true})
	cancels := make(chan string, 4)
	url := serveSidecar(t, &httpx.Sidecar{Upstream: up.url, OnCancel: func(source string) { cancels <- source }})
	mcpgoCallAndAbandon(t, url, up.started)
	if key := <-up.sawCancel; key != "mcpgo" {
		t.Errorf("upstream cancelled %q", key)
	}
	if source := <-cancels; source != "disconnect" {
		t.Errorf("the sidecar recorded a cancel from %q, want disconnect", source)
	}
}

package httpx_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
)

// legacyFront serves the sidecar, with its legacy endpoints, in front of
// the upstream's MCP server on an HTTP+SSE handler (sse) or a Streamable
// HTTP one, the transport detected; it returns the upstream and the
// sidecar's base URL.
func legacyFront(t *testing.T, sse bool) (*sdkServer, string) {
	return legacyFrontWith(t, sse, nil)
}

// legacyFrontWith is legacyFront with the Streamable HTTP handler's options.
func legacyFrontWith(t *testing.T, sse bool, opts *mcp.StreamableHTTPOptions) (*sdkServer, string) {
	u, url := autoSidecar(t, sse, opts, zaptest.NewLogger(t))
	return u, strings.TrimSuffix(url, "/mcp")
}

// autoSidecar serves the upstream's MCP server on an HTTP+SSE handler (sse)
// or a Streamable HTTP one (with opts), and the sidecar in front of it,
// transport detected, legacy endpoints served; it returns the upstream and
// the sidecar's /mcp URL. tune, if given, sets the sidecar's fields.
func autoSidecar(t *testing.T, sse bool, opts *mcp.StreamableHTTPOptions, log *zap.Logger, tune ...func(*httpx.Sidecar)) (*sdkServer, string) {
	u, s := newUpstreamServer()
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, opts)
	if sse {
		h = mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return s }, nil)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(u.release) })
	cs := &httpx.Children{} // sessions of the upstream, if HTTP+SSE
	sc := &httpx.Sidecar{Upstream: srv.URL, UpstreamTransport: httpx.TransportAuto, Logger: log, Children: cs, Legacy: &httpx.Legacy{}}
	for _, f := range tune {
		f(sc)
	}
	return u, serveSidecar(t, sc)
}

// TestLegacyClientCancel: a go-sdk client on the 2024-11-05 HTTP+SSE
// transport cancels a call through the sidecar's legacy endpoints, to an
// HTTP+SSE upstream and to a Streamable HTTP one: the upstream sees the
// cancel, the client gets no late progress, and the session goes on.
func TestLegacyClientCancel(t *testing.T) {
	t.Parallel()
	for _, sse := range []bool{true, false} {
		t.Run(map[bool]string{true: "HTTP+SSE upstream", false: "Streamable HTTP upstream"}[sse], func(t *testing.T) {
			watchdog(t, 30*time.Second)
			up, base := legacyFront(t, sse)
			goSDKClientCancels(t, up, &mcp.SSEClientTransport{Endpoint: base + "/sse"})
		})
	}
}

// TestLegacyClientCancelStatelessUpstream: in front of a stateless
// upstream (no session: a POSTed cancel cannot find the request there) the
// cancel closes the request's stream, which such a server takes as the
// cancel (2026-07-28).
func TestLegacyClientCancelStatelessUpstream(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up, base := legacyFrontWith(t, false, &mcp.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true})
	goSDKClientCancels(t, up, &mcp.SSEClientTransport{Endpoint: base + "/sse"})
}

// TestLegacyEndpointsSayWhatIsWrong: an unknown session and a wrong method
// each get a plain answer.
func TestLegacyEndpointsSayWhatIsWrong(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	_, base := legacyFront(t, true)
	for _, tc := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/message?sessionId=nope", `{"jsonrpc":"2.0","method":"ping","id":1}`, http.StatusNotFound},
		{"DELETE", "/sse", "", http.StatusMethodNotAllowed},
		{"GET", "/message", "", http.StatusMethodNotAllowed},
	} {
		req, _ := http.NewRequest(tc.method, base+tc.path, strings.NewReader(tc.body))
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
		}
	}
}

// TestLegacy2025ClientCancelsOnStatelessUpstream: a client that speaks only
// the 2025 revisions (as the TypeScript SDK's SSE transport and mcp-remote
// do) in front of a stateless upstream: a POSTed cancel finds no session
// there, and the go-sdk takes a closed stream as the cancel only of a
// 2026-07-28 request. The sidecar, having found with server/discover that
// the upstream speaks 2026-07-28, sends the session's requests as such,
// so that closing the stream reaches the tool; the client sees no late
// answer, and the session goes on.
func TestLegacy2025ClientCancelsOnStatelessUpstream(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up, base := legacyFrontWith(t, false, &mcp.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true})
	c := openLegacyClient(t, base)
	c.post(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"old","version":"1"}}}`)
	if m := <-c.msgs; m["id"] != 0.0 || m["result"] == nil {
		t.Fatalf("initialize: %v", m)
	}
	c.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	c.post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"wait_cancel","arguments":{"key":"old"},"_meta":{"progressToken":"p"}}}`)
	<-up.started
	if m := <-c.msgs; m["method"] != "notifications/progress" {
		t.Fatalf("want progress, got %v", m)
	}
	c.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
	if key := <-up.sawCancel; key != "old" {
		t.Errorf("upstream cancelled %q", key)
	}
	c.post(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	m := <-c.msgs
	if m["id"] != 2.0 || m["result"] == nil {
		t.Errorf("after the cancel, the session answers %v, want the tools/list result", m)
	}
}

// legacyClient is a raw client of the HTTP+SSE transport (2024-11-05).
type legacyClient struct {
	t        *testing.T
	endpoint string
	msgs     chan map[string]any // what the event stream carries
}

// openLegacyClient opens the event stream and reads the endpoint event.
func openLegacyClient(t *testing.T, base string) *legacyClient {
	resp, err := testClient.Get(base + "/sse")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	rd := framing.NewSSEReader(resp.Body, 0)
	ev, err := rd.Next()
	if err != nil || string(ev.Type) != "endpoint" {
		t.Fatalf("no endpoint event: %v", err)
	}
	c := &legacyClient{t: t, endpoint: base + string(ev.Data), msgs: make(chan map[string]any, 16)}
	go func() {
		defer close(c.msgs)
		for {
			ev, err := rd.Next()
			if err != nil {
				return
			}
			var m map[string]any
			if ev.HasData && json.Unmarshal(ev.Data, &m) == nil {
				c.msgs <- m
			}
		}
	}()
	return c
}

func (c *legacyClient) post(msg string) {
	c.t.Helper()
	if code, body := c.send(msg); code != http.StatusAccepted {
		c.t.Fatalf("POST %.80s: HTTP %d %s", msg, code, body)
	}
}

// send POSTs msg and returns the answer's status and body.
func (c *legacyClient) send(msg string) (int, string) {
	c.t.Helper()
	resp, err := testClient.Post(c.endpoint, "application/json", strings.NewReader(msg))
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

package httpx_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/child"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
)

// legacyFront serves the sidecar, with its legacy endpoints, in front of
// the upstream's MCP server on an HTTP+SSE handler (sse) or a Streamable
// HTTP one, the transport detected; it returns the upstream and the
// sidecar's base URL.
func legacyFront(t *testing.T, sse bool) (*upstream, string) {
	u, s := newUpstreamServer()
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	if sse {
		h = mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return s }, nil)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(u.release) })
	up, err := httpx.NewSSEUpstream(srv.URL, 0)
	if err != nil {
		t.Fatal(err)
	}
	cs := &httpx.Children{Dial: up.Dial, Child: child.Options{TermAfter: time.Second}}
	legacy := &httpx.Legacy{}
	url := serveSidecar(t, &httpx.Sidecar{Upstream: srv.URL, UpstreamTransport: httpx.TransportAuto,
		Logger: zaptest.NewLogger(t), Children: cs, Legacy: legacy})
	t.Cleanup(legacy.StopAll)
	t.Cleanup(cs.StopAll)
	return u, strings.TrimSuffix(url, "/mcp")
}

// TestLegacyClientCancel: a go-sdk client on the 2024-11-05 HTTP+SSE
// transport cancels a call through the sidecar's legacy endpoints to an
// HTTP+SSE upstream: the upstream sees the cancel, the client gets no late
// progress, and the session goes on.
func TestLegacyClientCancel(t *testing.T) {
	watchdog(t, 30*time.Second)
	up, base := legacyFront(t, true)
	goSDKClientCancels(t, up, &mcp.SSEClientTransport{Endpoint: base + "/sse"})
}

// TestLegacyEndpointsSayWhatIsWrong: an unknown session, a wrong method, a
// body that is not JSON, and an upstream the legacy front cannot serve yet
// each get a plain answer.
func TestLegacyEndpointsSayWhatIsWrong(t *testing.T) {
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
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s: %d, want %d", tc.method, tc.path, resp.StatusCode, tc.want)
		}
	}
	_, modern := legacyFront(t, false)
	resp, err := http.Get(modern + "/sse")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotImplemented {
		t.Errorf("GET /sse in front of a Streamable HTTP upstream: %d, want 501", resp.StatusCode)
	}
}

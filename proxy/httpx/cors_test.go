package httpx_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
)

// corsRequest sends a request with an Origin, and returns the answer's
// status, headers and body.
func corsRequest(t *testing.T, method, url, origin string, headers ...string) (int, http.Header, string) {
	t.Helper()
	body := ""
	if method == "POST" {
		body = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"web","version":"1"}}}`
	}
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Origin", origin)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestBrowserClientsGetCORS: with allowed_origins set, a browser client's
// preflight is answered for an allowed origin (methods, the MCP request
// headers, Authorization), its requests expose Mcp-Session-Id,
// MCP-Protocol-Version and WWW-Authenticate, never Allow-Credentials; other
// origins get 403; on the relay to an HTTP server and on a stdio server's
// front, and on an old client's endpoints.
func TestBrowserClientsGetCORS(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	const app = "https://app.example"
	up := newUpstream(t, &mcp.StreamableHTTPOptions{Stateless: true}) // no session left open upstream
	fronts := map[string]string{
		"relay": serveSidecar(t, &httpx.Sidecar{Upstream: up.url, AllowedOrigins: []string{app}}),
		"stdio server": childSidecar(t, &httpx.Children{}, func(sc *httpx.Sidecar) {
			sc.AllowedOrigins, sc.Legacy = []string{app}, &httpx.Legacy{}
		}),
	}
	fronts["old client's endpoint"] = strings.TrimSuffix(fronts["stdio server"], "/mcp") + "/sse"
	for name, url := range fronts {
		code, h, _ := corsRequest(t, "OPTIONS", url, app, "Access-Control-Request-Method", "POST",
			"Access-Control-Request-Headers", "content-type, authorization, mcp-protocol-version, mcp-session-id, mcp-param-region, x-evil")
		allowHeaders := h.Get("Access-Control-Allow-Headers")
		if code != 204 || h.Get("Access-Control-Allow-Origin") != app || !strings.Contains(h.Get("Access-Control-Allow-Methods"), "DELETE") ||
			!strings.Contains(allowHeaders, "authorization") || !strings.Contains(allowHeaders, "mcp-param-region") || strings.Contains(allowHeaders, "x-evil") {
			t.Errorf("%s: preflight %d %v", name, code, h)
		}
		if h.Get("Access-Control-Allow-Credentials") != "" {
			t.Errorf("%s: Allow-Credentials set", name)
		}
		if code, _, _ := corsRequest(t, "OPTIONS", url, "https://evil.example", "Access-Control-Request-Method", "POST"); code != 403 {
			t.Errorf("%s: another origin's preflight: %d, want 403", name, code)
		}
	}
	for _, name := range []string{"relay", "stdio server"} {
		code, h, body := corsRequest(t, "POST", fronts[name], app)
		if code != 200 || h.Get("Access-Control-Allow-Origin") != app || !strings.Contains(h.Get("Access-Control-Expose-Headers"), "Mcp-Session-Id") {
			t.Errorf("%s: initialize %d %v %s", name, code, h, body)
		}
		if code, _, _ := corsRequest(t, "POST", fronts[name], "https://evil.example"); code != 403 {
			t.Errorf("%s: another origin's POST: %d, want 403", name, code)
		}
	}
	star := serveSidecar(t, &httpx.Sidecar{Upstream: up.url, AllowedOrigins: []string{"*"}})
	if _, h, _ := corsRequest(t, "OPTIONS", star, app, "Access-Control-Request-Method", "POST"); h.Get("Access-Control-Allow-Origin") != "*" ||
		h.Get("Access-Control-Allow-Credentials") != "" {
		t.Errorf("allowed_origins *: %v", h)
	}
}

// TestBrowserClientsGetCORSOnTheMetadata: a browser client reads the
// sidecar's OAuth protected resource metadata before it signs in; its
// preflight there is answered for an allowed origin as on the MCP endpoint
// (it was answered 404, and the client could not sign in), and refused for
// another origin (issue 40, item 8). In front of a stdio server there is
// no metadata to read, nor a preflight answered for it.
func TestBrowserClientsGetCORSOnTheMetadata(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	const app = "https://app.example"
	up := newUpstream(t, &mcp.StreamableHTTPOptions{Stateless: true})
	base := strings.TrimSuffix(serveSidecar(t, &httpx.Sidecar{Upstream: up.url, AllowedOrigins: []string{app}}), "/mcp")
	for _, path := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"} {
		code, h, _ := corsRequest(t, "OPTIONS", base+path, app, "Access-Control-Request-Method", "GET")
		if code != 204 || h.Get("Access-Control-Allow-Origin") != app || !strings.Contains(h.Get("Access-Control-Allow-Methods"), "GET") {
			t.Errorf("%s: a preflight from an allowed origin: %d, %v", path, code, h)
		}
		if code, _, _ := corsRequest(t, "OPTIONS", base+path, "https://evil.example", "Access-Control-Request-Method", "GET"); code != 403 {
			t.Errorf("%s: a preflight from another origin: %d, want 403", path, code)
		}
	}
	stdio := strings.TrimSuffix(childSidecar(t, &httpx.Children{}, func(sc *httpx.Sidecar) { sc.AllowedOrigins = []string{app} }), "/mcp")
	if code, _, _ := corsRequest(t, "OPTIONS", stdio+"/.well-known/oauth-protected-resource/mcp", app, "Access-Control-Request-Method", "GET"); code != 404 {
		t.Errorf("a stdio server's front answered a metadata preflight %d, want 404", code)
	}
}

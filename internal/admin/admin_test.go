package admin

import (
	"encoding/base64"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/metrics"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
)

// adminClient serves the admin endpoints behind g on an in-memory
// listener (no port: the guard is what is tested, for a listener on
// loopback or beyond) and returns a function that sends one request.
func adminClient(t *testing.T, g *adminGuard) func(method, path string, headers ...string) int {
	t.Helper()
	p := policy.Defaults()
	p.Hooks.Store = t.TempDir()
	e, err := policy.New(policy.Options{Policy: p, Audit: policy.Audit{Path: "off"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	var engine atomic.Pointer[policy.Engine]
	engine.Store(e)
	ln := fasthttputil.NewInmemoryListener()
	srv := &fasthttp.Server{Handler: adminHandler(g, metrics.New(metrics.Gauges{}), func() error { return nil }, &engine, &followers{done: make(chan struct{})})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	c := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
	return func(method, path string, headers ...string) int {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://127.0.0.1:9090" + path)
		req.Header.SetMethod(method)
		for i := 0; i+1 < len(headers); i += 2 {
			if headers[i] == "Host" {
				req.Header.SetHost(headers[i+1])
				req.UseHostHeader = true
				continue
			}
			req.Header.Set(headers[i], headers[i+1])
		}
		if err := c.DoTimeout(req, resp, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode()
	}
}

// TestAdminGuard: the admin listener applies the MCP endpoint's Host and
// Origin rules to every endpoint (DNS rebinding, cross-site posts); state
// changes are POSTs with a JSON content type; with a token, /status and
// /hooks need it (bearer, or a Basic password); beyond loopback they need
// one always; /healthz, /readyz and /metrics stay open.
func TestAdminGuard(t *testing.T) {
	json := []string{"Content-Type", "application/json"}
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("anyone:tok"))
	for _, c := range []struct {
		name         string
		guard        adminGuard
		method, path string
		headers      []string
		want         int
	}{
		{"probe on loopback", adminGuard{loopback: true}, "GET", "/healthz", nil, 200},
		{"rebound host", adminGuard{loopback: true}, "GET", "/status", []string{"Host", "evil.example:9090"}, 403},
		{"rebound host, probe", adminGuard{loopback: true}, "GET", "/metrics", []string{"Host", "evil.example:9090"}, 403},
		{"status on loopback", adminGuard{loopback: true}, "GET", "/status", nil, 200},
		{"hooks on loopback", adminGuard{loopback: true}, "GET", "/hooks", nil, 200},
		{"cross-site drop", adminGuard{loopback: true}, "POST", "/hooks/drop", append([]string{"Origin", "https://evil.example"}, json...), 403},
		{"form-encoded drop", adminGuard{loopback: true}, "POST", "/hooks/drop", []string{"Content-Type", "application/x-www-form-urlencoded"}, 415},
		{"plain-text drop", adminGuard{loopback: true}, "POST", "/hooks/drop", []string{"Content-Type", "text/plain"}, 415},
		{"GET drop", adminGuard{loopback: true}, "GET", "/hooks/drop", nil, 405},
		{"JSON drop", adminGuard{loopback: true}, "POST", "/hooks/drop", json, 200},
		{"status without the token", adminGuard{loopback: true, token: "tok"}, "GET", "/status", nil, 401},
		{"status, wrong token", adminGuard{loopback: true, token: "tok"}, "GET", "/status", []string{"Authorization", "Bearer nope"}, 401},
		{"status, bearer", adminGuard{loopback: true, token: "tok"}, "GET", "/status", []string{"Authorization", "Bearer tok"}, 200},
		{"status, basic", adminGuard{loopback: true, token: "tok"}, "GET", "/status", []string{"Authorization", basic}, 200},
		{"drop without the token", adminGuard{loopback: true, token: "tok"}, "POST", "/hooks/drop", json, 401},
		{"drop with the token", adminGuard{loopback: true, token: "tok"}, "POST", "/hooks/drop", append([]string{"Authorization", "Bearer tok"}, json...), 200},
		{"metrics with a token set", adminGuard{loopback: true, token: "tok"}, "GET", "/metrics", nil, 200},
		{"beyond loopback, probe", adminGuard{}, "GET", "/readyz", []string{"Host", "10.1.2.3:9090"}, 200},
		{"beyond loopback, metrics", adminGuard{}, "GET", "/metrics", []string{"Host", "10.1.2.3:9090"}, 200},
		{"beyond loopback, no token set", adminGuard{}, "GET", "/hooks", []string{"Host", "10.1.2.3:9090"}, 403},
		{"beyond loopback, token", adminGuard{token: "tok"}, "GET", "/hooks", []string{"Host", "10.1.2.3:9090", "Authorization", "Bearer tok"}, 200},
		{"beyond loopback, without it", adminGuard{token: "tok"}, "GET", "/status", []string{"Host", "10.1.2.3:9090"}, 401},
		{"beyond loopback, cross-site", adminGuard{token: "tok"}, "POST", "/hooks/drop",
			append([]string{"Origin", "https://evil.example", "Authorization", "Bearer tok"}, json...), 403},
		{"beyond loopback, allowed origin", adminGuard{token: "tok", origins: []string{"https://ops.example"}}, "POST", "/hooks/drop",
			append([]string{"Origin", "https://ops.example", "Authorization", "Bearer tok"}, json...), 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			do := adminClient(t, &c.guard)
			if got := do(c.method, c.path, c.headers...); got != c.want {
				t.Errorf("%s %s %v = %d, want %d", c.method, c.path, c.headers, got, c.want)
			}
		})
	}
}

package admin

import (
	"bufio"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
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

// TestHealthzUnderSlowHeads: request heads sent a byte a second from four
// addresses fill the admin listener's connections, and a liveness probe
// from a fifth is still answered, each time. Before, only idle connections
// were closed for room: /healthz failed 33 of 36 probes (a Kubernetes
// liveness probe would have restarted the pod). A head that never ends is
// closed at http.header_timeout.
func TestHealthzUnderSlowHeads(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const headTimeout = 500 * time.Millisecond
	stop := serveOn(tcp, "", config.HTTP{HeaderTimeout: headTimeout}, metrics.New(metrics.Gauges{}), func() error { return nil }, nil, nil, zap.NewNop())
	defer stop()
	addr := tcp.Addr().String()
	dialFrom := func(src string) net.Conn {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	var slow []net.Conn
	defer func() {
		for _, c := range slow {
			c.Close()
		}
	}()
	for i := range adminMaxConns {
		c := dialFrom(fmt.Sprintf("127.0.0.%d", 2+i%4))
		io.WriteString(c, "GET /healthz HT") // and never the rest
		slow = append(slow, c)
	}
	for i := range 5 {
		c := dialFrom("127.0.0.6")
		c.SetDeadline(time.Now().Add(10 * time.Second)) // bounds the test
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
		var resp fasthttp.Response
		if err := resp.Read(bufio.NewReader(c)); err != nil || resp.StatusCode() != 200 {
			t.Fatalf("probe %d under slow heads: %v (status %d)", i, err, resp.StatusCode())
		}
		c.Close()
	}
	// A slow head still held is closed at the header timeout (after a 408,
	// which fasthttp may write first), not at the body's 30 s.
	last := slow[len(slow)-1]
	last.SetReadDeadline(time.Now().Add(10 * time.Second)) // bounds the test
	start := time.Now()
	if _, err := io.ReadAll(last); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a head that never ends was not closed: %v", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("a slow head was closed after %v, header timeout %v", waited, headTimeout)
	}
}

package origin

import (
	"bufio"
	"slices"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// request makes a request context as a server reads it, from the
// request line and the headers given, name and value in turn (a
// loopback Host if none).
func request(method, uri string, headers ...string) *fasthttp.RequestCtx {
	raw := method + " " + uri + " HTTP/1.1\r\n"
	if !slices.Contains(headers, "Host") {
		raw += "Host: 127.0.0.1\r\n"
	}
	for i := 0; i+1 < len(headers); i += 2 {
		raw += headers[i] + ": " + headers[i+1] + "\r\n"
	}
	ctx := &fasthttp.RequestCtx{}
	if err := ctx.Request.Read(bufio.NewReader(strings.NewReader(raw + "\r\n"))); err != nil {
		panic(err)
	}
	return ctx
}

// TestAllowed: an origin is accepted when listed, when "*" is, or, on a
// loopback listener only, when it is a loopback one.
func TestAllowed(t *testing.T) {
	for _, tc := range []struct {
		origin   string
		allowed  []string
		loopback bool
		want     bool
	}{
		{"https://app.example", []string{"https://app.example"}, false, true},
		{"https://evil.example", []string{"https://app.example"}, false, false},
		{"https://evil.example", []string{"*"}, false, true},
		{"http://localhost:3000", nil, true, true},
		{"http://127.0.0.1:8080", nil, true, true},
		{"http://localhost:3000", nil, false, false},
		{"ftp://localhost", nil, true, false},
	} {
		if got := Allowed(tc.origin, tc.allowed, tc.loopback); got != tc.want {
			t.Errorf("Allowed(%q, %v, loopback %v) = %v", tc.origin, tc.allowed, tc.loopback, got)
		}
	}
}

// TestRefuse: two Host or Origin headers are a 400, an origin not allowed
// a 403, and on a loopback listener a Host (header or absolute URI) that
// does not name this machine a 403.
func TestRefuse(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  *fasthttp.RequestCtx
		want int
	}{
		{"plain", request("POST", "/mcp", "Host", "127.0.0.1:8080"), 0},
		{"two origins", request("POST", "/mcp", "Host", "127.0.0.1", "Origin", "http://localhost", "origin", "http://evil"), fasthttp.StatusBadRequest},
		{"loopback origin", request("POST", "/mcp", "Host", "127.0.0.1", "Origin", "http://localhost:3000"), 0},
		{"origin refused", request("POST", "/mcp", "Host", "127.0.0.1", "Origin", "https://evil.example"), fasthttp.StatusForbidden},
		{"rebinding", request("POST", "/mcp", "Host", "evil.example"), fasthttp.StatusForbidden},
		{"absolute URI", request("POST", "http://evil.example/mcp", "Host", "127.0.0.1"), fasthttp.StatusForbidden},
	} {
		if got, why := Refuse(tc.ctx, nil, true); got != tc.want {
			t.Errorf("%s: %d (%s), want %d", tc.name, got, why, tc.want)
		}
	}
}

// TestCORS: a preflight from an accepted origin is answered 204 with the
// methods and the MCP headers asked for (no others), one from another
// origin 403, one for a path not served 404; a request from an accepted
// origin gets its Allow-Origin and the exposed headers; with "*" no
// origin is echoed.
func TestCORS(t *testing.T) {
	served := func(p string) bool { return p == "/mcp" }
	allowed := []string{"https://app.example"}
	pre := request("OPTIONS", "/mcp", "Origin", "https://app.example", "Access-Control-Request-Method", "POST",
		"Access-Control-Request-Headers", "Mcp-Session-Id, X-Other, mcp-param-region")
	if !CORS(pre, allowed, false, served) || pre.Response.StatusCode() != fasthttp.StatusNoContent {
		t.Fatalf("preflight: %d", pre.Response.StatusCode())
	}
	h := &pre.Response.Header
	if got := string(h.Peek("Access-Control-Allow-Headers")); got != "mcp-session-id, mcp-param-region" {
		t.Errorf("Allow-Headers %q", got)
	}
	if string(h.Peek("Access-Control-Allow-Origin")) != "https://app.example" || len(h.Peek("Access-Control-Allow-Credentials")) > 0 {
		t.Errorf("Allow-Origin %q, Allow-Credentials %q", h.Peek("Access-Control-Allow-Origin"), h.Peek("Access-Control-Allow-Credentials"))
	}
	other := request("OPTIONS", "/mcp", "Origin", "https://evil.example", "Access-Control-Request-Method", "POST")
	if !CORS(other, allowed, false, served) || other.Response.StatusCode() != fasthttp.StatusForbidden {
		t.Errorf("a preflight from another origin: %d", other.Response.StatusCode())
	}
	lost := request("OPTIONS", "/elsewhere", "Origin", "https://app.example", "Access-Control-Request-Method", "POST")
	if !CORS(lost, allowed, false, served) || lost.Response.StatusCode() != fasthttp.StatusNotFound {
		t.Errorf("a preflight for a path not served: %d", lost.Response.StatusCode())
	}
	post := request("POST", "/mcp", "Origin", "https://app.example")
	if CORS(post, []string{"*"}, false, served) {
		t.Fatal("a POST was answered")
	}
	if got := string(post.Response.Header.Peek("Access-Control-Allow-Origin")); got != "*" || len(post.Response.Header.Peek("Access-Control-Expose-Headers")) == 0 {
		t.Errorf("a POST from any origin: Allow-Origin %q", got)
	}
	if IsCORSHeader([]byte("Access-Control-Allow-Origin")) != true || IsCORSHeader([]byte("Content-Type")) {
		t.Error("IsCORSHeader is wrong")
	}
}

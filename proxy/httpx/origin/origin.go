// Package origin holds who may call an MCP endpoint from where: the Origin
// and Host rules every request meets (an Origin among those allowed, or a
// loopback one on a loopback listener; a Host that names this machine on a
// loopback listener, against DNS rebinding; one of each at most), and the
// CORS answers a browser client needs. The HTTP front and the admin
// listener apply them alike.
package origin

import (
	"bytes"
	"net/url"
	"slices"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/netproxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// Refuse applies the MCP endpoint's Host and Origin rules to a
// request: one Host and one Origin header at most; an Origin (if any) among
// allowedOrigins ("*": any) or, on a loopback listener, a loopback origin;
// and on a loopback listener (loopback set) a Host, both as the header and
// as the authority of an absolute-form request URI, that names this machine
// (which defeats DNS rebinding). It returns 0, or the status and why the
// request is refused. The admin listener applies the same rules.
func Refuse(ctx *fasthttp.RequestCtx, allowedOrigins []string, loopback bool) (status int, why string) {
	h := &ctx.Request.Header
	hosts, origins := 0, 0
	for k := range h.AllInOrder() { // the headers as sent: one pass for both
		switch {
		case strings.EqualFold(string(k), "Host"):
			hosts++
		case strings.EqualFold(string(k), "Origin"):
			origins++
		}
	}
	if hosts > 1 || origins > 1 {
		return fasthttp.StatusBadRequest, "more than one Host or Origin header"
	}
	if origins > 0 {
		if origin := string(upstream.Peek(h.All(), "Origin")); origin != "" && !Allowed(origin, allowedOrigins, loopback) {
			return fasthttp.StatusForbidden, "origin not allowed"
		}
	}
	if loopback && (!loopbackHost(string(h.Host())) || !loopbackHost(string(ctx.URI().Host()))) {
		return fasthttp.StatusForbidden, "host not allowed"
	}
	return 0, ""
}

// Allowed reports whether a request's Origin is accepted: among allowed
// ("*": any), or, on a loopback listener, a loopback origin.
func Allowed(origin string, allowed []string, loopback bool) bool {
	if slices.Contains(allowed, "*") || slices.Contains(allowed, origin) {
		return true
	}
	u, err := url.Parse(origin)
	return loopback && err == nil && (u.Scheme == "http" || u.Scheme == "https") && loopbackHost(u.Host)
}

// Browser MCP clients (the web inspector, a web app) send their requests
// cross-origin: the browser asks first with a preflight (OPTIONS), and lets
// the page read only the response headers the server exposes. The sidecar
// answers for the origins it accepts (http.allowed_origins, and loopback
// origins on a loopback listener); others keep getting 403. It owns CORS:
// the upstream's Access-Control-* headers are not relayed.

// corsRequestHeaders are the request headers a browser client may send.
var corsRequestHeaders = []string{"accept", "authorization", "content-type", "last-event-id", "mcp-method", "mcp-name",
	"mcp-protocol-version", "mcp-session-id"}

// corsExposed are the response headers a browser client must read.
const corsExposed = "Mcp-Session-Id, MCP-Protocol-Version, WWW-Authenticate"

// CORS sets the CORS headers of a request from an accepted origin (see
// Allowed), and answers its preflight for a path served reports true of;
// it reports whether the request was answered.
func CORS(ctx *fasthttp.RequestCtx, allowed []string, loopback bool, served func(path string) bool) bool {
	origin := string(upstream.Peek(ctx.Request.Header.All(), "Origin"))
	preflight := ctx.IsOptions() && len(ctx.Request.Header.Peek("Access-Control-Request-Method")) > 0
	if origin == "" || !Allowed(origin, allowed, loopback) {
		if preflight {
			ctx.Error("origin not allowed", fasthttp.StatusForbidden)
		}
		return preflight
	}
	h := &ctx.Response.Header
	if slices.Contains(allowed, "*") {
		h.Set("Access-Control-Allow-Origin", "*") // and never Allow-Credentials with it
	} else {
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
	}
	h.Set("Access-Control-Expose-Headers", corsExposed)
	if !preflight {
		return false
	}
	if !served(string(ctx.Path())) {
		ctx.Error("not found", fasthttp.StatusNotFound)
		return true
	}
	h.Set("Access-Control-Allow-Methods", "GET, POST, DELETE")
	h.Set("Access-Control-Allow-Headers", allowedHeaders(ctx.Request.Header.Peek("Access-Control-Request-Headers")))
	h.Set("Access-Control-Max-Age", "600")
	ctx.SetStatusCode(fasthttp.StatusNoContent)
	return true
}

// allowedHeaders returns, of the headers a preflight asks for, those a
// browser client may send: the MCP headers (Mcp-Param-* included),
// Authorization, Content-Type and Accept.
func allowedHeaders(asked []byte) string {
	var out []string
	for name := range strings.SplitSeq(string(asked), ",") {
		name = strings.ToLower(strings.TrimSpace(name))
		if slices.Contains(corsRequestHeaders, name) || strings.HasPrefix(name, "mcp-param-") {
			out = append(out, name)
		}
	}
	if len(out) == 0 {
		return strings.Join(corsRequestHeaders, ", ")
	}
	return strings.Join(out, ", ")
}

// IsCORSHeader reports whether a response header is a CORS one, which the
// front sets itself: an upstream's is never relayed.
func IsCORSHeader(name []byte) bool {
	const prefix = "access-control-"
	return len(name) > len(prefix) && bytes.EqualFold(name[:len(prefix)], []byte(prefix))
}

// loopbackHost reports whether a Host header names this machine: the only
// names a client of a loopback listener may use, which defeats DNS
// rebinding (a hostile page's name resolving to 127.0.0.1).
func loopbackHost(host string) bool { return netproxy.Loopback(host) }

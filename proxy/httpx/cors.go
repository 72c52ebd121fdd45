package httpx

import (
	"bytes"
	"slices"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

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

// cors sets the CORS headers of a request from an accepted origin, and
// answers its preflight; it reports whether the request was answered.
func (s *Sidecar) cors(ctx *fasthttp.RequestCtx) bool {
	origin := string(upstream.Peek(ctx.Request.Header.All(), "Origin"))
	preflight := ctx.IsOptions() && len(ctx.Request.Header.Peek("Access-Control-Request-Method")) > 0
	if origin == "" || !originAllowed(origin, s.AllowedOrigins, s.CheckHost) {
		if preflight {
			ctx.Error("origin not allowed", fasthttp.StatusForbidden)
		}
		return preflight
	}
	h := &ctx.Response.Header
	if slices.Contains(s.AllowedOrigins, "*") {
		h.Set("Access-Control-Allow-Origin", "*") // and never Allow-Credentials with it
	} else {
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
	}
	h.Set("Access-Control-Expose-Headers", corsExposed)
	if !preflight {
		return false
	}
	if !s.servedPath(string(ctx.Path())) {
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

// servedPath reports whether the sidecar serves path: the MCP endpoint,
// or an old client's.
func (s *Sidecar) servedPath(path string) bool {
	return path == s.path || (s.Legacy != nil && (path == s.Legacy.sseRoute() || path == s.Legacy.msgRoute()))
}

// corsHeader reports whether a response header is a CORS one, which the
// sidecar sets itself.
func corsHeader(name []byte) bool {
	const prefix = "access-control-"
	return len(name) > len(prefix) && bytes.EqualFold(name[:len(prefix)], []byte(prefix))
}

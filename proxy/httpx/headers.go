package httpx

import (
	"bytes"
	"net"
	"strings"

	"github.com/valyala/fasthttp"
)

// hopByHop are the headers that concern one connection only (RFC 9110
// §7.6.1) and are never relayed.
var hopByHop = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// copyRequestHeaders copies the client's headers to the upstream request:
// all of them (Mcp-* and MCP-Protocol-Version, known or not, Authorization,
// Last-Event-ID) except hop-by-hop ones, Host, which is the upstream's, and
// Content-Length, which fasthttp sets.
func copyRequestHeaders(dst *fasthttp.Request, src *fasthttp.Request) {
	for k, v := range src.Header.All() {
		name := string(k)
		if hopByHop[name] || name == "Host" || name == "Content-Length" {
			continue
		}
		dst.Header.AddBytesKV(k, v)
	}
}

// copyResponseHeaders copies the upstream's response headers to the
// client's response, except hop-by-hop ones and Content-Length.
func copyResponseHeaders(dst *fasthttp.Response, src *fasthttp.Response) {
	for k, v := range src.Header.All() {
		name := string(k)
		if hopByHop[name] || name == "Content-Length" {
			continue
		}
		dst.Header.SetBytesKV(k, v)
	}
}

// isEventStream reports whether a Content-Type is text/event-stream.
func isEventStream(contentType []byte) bool {
	return bytes.HasPrefix(bytes.TrimSpace(bytes.ToLower(contentType)), []byte("text/event-stream"))
}

// loopbackHost reports whether a Host header names this machine: the only
// names a client of a loopback listener may use, which defeats DNS
// rebinding (a hostile page's name resolving to 127.0.0.1).
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

package httpx

import (
	"bytes"
	"iter"
	"net"
	"slices"
	"strings"

	"github.com/valyala/fasthttp"
)

// hopByHop are the headers that concern one connection only (RFC 9110
// §7.6.1) and are never relayed, in lower case.
var hopByHop = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true, "proxy-authenticate": true,
	"proxy-authorization": true, "te": true, "trailer": true, "transfer-encoding": true, "upgrade": true,
}

// skipped reports whether a header, named in any case, is one of the
// hop-by-hop headers or of the extra names (given in lower case).
func skipped(name []byte, extra ...string) bool {
	lower := strings.ToLower(string(name))
	return hopByHop[lower] || slices.Contains(extra, lower)
}

// peek returns the value of the first header called name, matched without
// regard to case as HTTP requires: the upstream client keeps names as
// received, and servers such as uvicorn send them in lower case.
func peek(all iter.Seq2[[]byte, []byte], name string) []byte {
	for k, v := range all {
		if strings.EqualFold(string(k), name) {
			return v
		}
	}
	return nil
}

// count returns how many headers are called name, in any case.
func count(all iter.Seq2[[]byte, []byte], name string) int {
	n := 0
	for k := range all {
		if strings.EqualFold(string(k), name) {
			n++
		}
	}
	return n
}

// copyRequestHeaders copies the client's headers to the upstream request:
// all of them (Mcp-* and MCP-Protocol-Version, known or not, Authorization,
// Last-Event-ID) except hop-by-hop ones, Host, which is the upstream's, and
// Content-Length, which fasthttp sets.
func copyRequestHeaders(dst *fasthttp.Request, src *fasthttp.Request) {
	for k, v := range src.Header.All() {
		if skipped(k, "host", "content-length") {
			continue
		}
		dst.Header.AddBytesKV(k, v)
	}
}

// copyResponseHeaders copies the upstream's response headers to the
// client's response, except hop-by-hop ones and Content-Length.
func copyResponseHeaders(dst *fasthttp.Response, src *fasthttp.Response) {
	for k, v := range src.Header.All() {
		if skipped(k, "content-length") {
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

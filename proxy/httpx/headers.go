package httpx

import (
	"iter"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/netproxy"
)

// hopByHop are the headers that concern one connection only (RFC 9110
// §7.6.1) and are never relayed, in lower case.
var hopByHop = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true, "proxy-authenticate": true,
	"proxy-authorization": true, "te": true, "trailer": true, "transfer-encoding": true, "upgrade": true,
}

// skipped reports whether a header, named in any case, is one of the
// hop-by-hop headers or of the extra names (given in lower case, none
// longer than the longest hop-by-hop name). It runs for every header of
// every relayed request and response, so it lowers the name on the stack.
func skipped(name []byte, extra ...string) bool {
	var buf [len("proxy-authorization")]byte
	if len(name) > len(buf) {
		return false // longer than any name skipped
	}
	lower := buf[:len(name)]
	for i, c := range name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		lower[i] = c
	}
	if hopByHop[string(lower)] {
		return true
	}
	for _, e := range extra {
		if string(lower) == e {
			return true
		}
	}
	return false
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
		if skipped(k, "content-length") || corsHeader(k) {
			continue
		}
		dst.Header.SetBytesKV(k, v)
	}
}

// loopbackHost reports whether a Host header names this machine: the only
// names a client of a loopback listener may use, which defeats DNS
// rebinding (a hostile page's name resolving to 127.0.0.1).
func loopbackHost(host string) bool { return netproxy.Loopback(host) }

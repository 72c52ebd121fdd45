package httpx

import (
	"iter"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/netproxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

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

// copyResponseHeaders copies the upstream's response headers to the
// client's response, except hop-by-hop ones and Content-Length.
func copyResponseHeaders(dst *fasthttp.Response, src *fasthttp.Response) {
	for k, v := range src.Header.All() {
		if upstream.Skipped(k, "content-length") || corsHeader(k) {
			continue
		}
		dst.Header.SetBytesKV(k, v)
	}
}

// loopbackHost reports whether a Host header names this machine: the only
// names a client of a loopback listener may use, which defeats DNS
// rebinding (a hostile page's name resolving to 127.0.0.1).
func loopbackHost(host string) bool { return netproxy.Loopback(host) }

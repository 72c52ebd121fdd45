package httpx

import (
	"bytes"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/connlimit"
)

// forwardingHeaders say whom a request came from and through: only a
// trusted proxy's (TrustedProxies) are believed, and passed upstream. A
// client's own could tell the upstream it is someone else.
var forwardingHeaders = []string{"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Forwarded-Port", "X-Real-Ip"}

// dropHopHeaders takes out of a client's request what must not reach the
// upstream: the headers its Connection header names (they concern that
// connection only, RFC 9110 §7.6.1; the fixed hop-by-hop ones are never
// copied), and the forwarding headers of a client that is no trusted
// proxy. The sidecar adds none of its own.
func (s *Sidecar) dropHopHeaders(ctx *fasthttp.RequestCtx) {
	h := &ctx.Request.Header
	var named [][]byte
	forwarded := false
	for k, v := range h.All() { // one look at each header: most requests have nothing to drop
		switch {
		case bytes.EqualFold(k, []byte(fasthttp.HeaderConnection)):
			for name := range bytes.SplitSeq(v, []byte(",")) {
				name = bytes.TrimSpace(name)
				if len(name) > 0 && !bytes.EqualFold(name, []byte("close")) && !bytes.EqualFold(name, []byte("keep-alive")) {
					named = append(named, bytes.Clone(name))
				}
			}
		case !forwarded && isForwarding(k):
			forwarded = true
		}
	}
	for _, name := range named {
		h.DelBytes(name)
	}
	if !forwarded || len(s.TrustedProxies) > 0 && s.trusts(connlimit.AddrOf(ctx.RemoteAddr())) {
		return
	}
	for _, name := range forwardingHeaders {
		h.Del(name)
	}
}

// isForwarding reports whether a header, named in any case, is one of
// forwardingHeaders.
func isForwarding(name []byte) bool {
	for _, f := range forwardingHeaders {
		if bytes.EqualFold(name, []byte(f)) {
			return true
		}
	}
	return false
}

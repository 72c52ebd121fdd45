package upstream

import (
	"github.com/valyala/fasthttp"
)

// Header is one request header a client of an upstream adds to every
// request (an API key, a bearer token).
type Header struct{ Name, Value string }

// AddHeaders makes c add hs to each request it sends, unless the request
// sets the header itself.
func AddHeaders(c *fasthttp.Client, hs []Header) {
	if len(hs) == 0 {
		return
	}
	before := c.ConfigureClient
	c.ConfigureClient = func(hc *fasthttp.HostClient) error {
		if before != nil {
			if err := before(hc); err != nil {
				return err
			}
		}
		hc.Transport = headerTransport{next: hc.Transport, hs: hs}
		return nil
	}
}

// headerTransport adds headers to each request, then sends it as next
// would (fasthttp's default transport when nil).
type headerTransport struct {
	next fasthttp.RoundTripper
	hs   []Header
}

func (t headerTransport) RoundTrip(hc *fasthttp.HostClient, req *fasthttp.Request, resp *fasthttp.Response) (bool, error) {
	for _, h := range t.hs {
		if len(req.Header.Peek(h.Name)) == 0 {
			req.Header.Set(h.Name, h.Value)
		}
	}
	next := t.next
	if next == nil {
		next = fasthttp.DefaultTransport
	}
	return next.RoundTrip(hc, req, resp)
}

// hopByHop are the headers that concern one connection only (RFC 9110
// §7.6.1) and are never relayed, in lower case.
var hopByHop = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true, "proxy-authenticate": true,
	"proxy-authorization": true, "te": true, "trailer": true, "transfer-encoding": true, "upgrade": true,
}

// Skipped reports whether a header, named in any case, is one of the
// hop-by-hop headers or of the extra names (given in lower case, none
// longer than the longest hop-by-hop name). It runs for every header of
// every relayed request and response, so it lowers the name on the stack.
func Skipped(name []byte, extra ...string) bool {
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

// CopyRequestHeaders copies the client's headers to the upstream request:
// all of them (Mcp-* and MCP-Protocol-Version, known or not, Authorization,
// Last-Event-ID) except hop-by-hop ones, Host, which is the upstream's, and
// Content-Length, which fasthttp sets.
func CopyRequestHeaders(dst *fasthttp.Request, src *fasthttp.Request) {
	for k, v := range src.Header.All() {
		if Skipped(k, "host", "content-length") {
			continue
		}
		dst.Header.AddBytesKV(k, v)
	}
}

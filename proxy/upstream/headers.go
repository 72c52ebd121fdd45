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
	c.ConfigureClient = func(hc *fasthttp.HostClient) error {
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

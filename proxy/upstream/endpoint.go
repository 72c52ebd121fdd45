package upstream

import (
	"cmp"
	"net/url"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/mcpheader"
)

// Endpoint is a Streamable HTTP server's MCP endpoint as the proxy reaches
// it: every request the proxy sends such a server is made here, whichever
// side of the proxy asks. The sidecar's relay passes a client's requests on
// through it (and reads the answers' event streams through to the client
// as they come); an old client's session and the bridge (streamBackend)
// send their lines through it; the proxy's own requests (its cancels, its
// tasks/cancel, the transport and revision probes) go through it too.
type Endpoint struct {
	// URL is the server's MCP endpoint. Required.
	URL *url.URL
	// Client sends the requests; it must stream response bodies.
	Client *fasthttp.Client
}

// Request is one request to an Endpoint.
type Request struct {
	// Method is the HTTP method; if empty, POST.
	Method string
	// Body is the JSON-RPC message or batch the request carries, if any.
	Body []byte
	// Posting, if not nil, is told once Body has been written to the
	// connection, or once the request has failed (or been released)
	// without writing it: it carries the body.
	Posting *Posting
	// From, if not nil, is the client's request this one passes on (the
	// relay's): its headers, but hop-by-hop ones, Host and Content-Length,
	// and its query go along, and no Accept or Content-Type of the
	// proxy's.
	From *fasthttp.Request
	// Session and Version, if not empty, name the session
	// (Mcp-Session-Id) and the protocol revision (MCP-Protocol-Version).
	Session, Version string
	// Msg, if not nil, is the message Body holds: the headers 2026-07-28
	// requires to mirror it are set (MirrorHeaders), and the revision its
	// _meta names, if any, replaces Version.
	Msg *framing.Message
	// Tools, if not nil, is what the client learned of the server's
	// tools: a 2026-07-28 tools/call gets its mirrored parameters'
	// Mcp-Param-* headers from it.
	Tools *mcpheader.Tools
	// LastEventID, if not empty, resumes a stream after that event.
	LastEventID string
}

// Build fills req, a request the caller acquired, with r: for a caller
// that sends it later or elsewhere (the relay copies its client's request
// before its handler returns, and sends it on a goroutine).
func (e *Endpoint) Build(req *fasthttp.Request, r Request) {
	req.SetRequestURI(e.URL.String())
	if r.From != nil {
		if q := r.From.URI().QueryString(); len(q) > 0 {
			req.URI().SetQueryStringBytes(q)
		}
		CopyRequestHeaders(req, r.From)
	} else {
		req.Header.Set("Accept", "application/json, text/event-stream")
	}
	req.Header.SetMethod(cmp.Or(r.Method, fasthttp.MethodPost))
	if r.Body != nil && r.From == nil { // else the client's own
		req.Header.SetContentType("application/json")
	}
	switch {
	case r.Posting != nil:
		// Closed by fasthttp once it has copied the body to the
		// connection, or by the request's release if it never did.
		r.Posting.body.Reset(r.Body)
		req.SetBodyStream(r.Posting, len(r.Body))
	case r.Body != nil:
		req.SetBody(r.Body)
	}
	if r.LastEventID != "" {
		req.Header.Set("Last-Event-ID", r.LastEventID)
	}
	if r.Session != "" {
		req.Header.Set(SessionHeader, r.Session)
	}
	version := r.Version
	if r.Msg != nil {
		MirrorHeaders(req, r.Msg, &version)
	}
	if r.mirrorsParams() { // the proxy's, not From's (a first try's, when From is one)
		delParams(&req.Header)
		r.Tools.Mirror(r.Msg.Name(), r.Msg.Raw[r.Msg.ParamsSpan.Start:r.Msg.ParamsSpan.End], req.Header.Set)
	}
	if version != "" {
		req.Header.Set(VersionHeader, version)
	}
}

// delParams deletes every header that mirrors a tool's parameter
// (Mcp-Param-*).
func delParams(h *fasthttp.RequestHeader) {
	var names []string
	for k := range h.All() {
		if len(k) > len(paramPrefix) && strings.EqualFold(string(k[:len(paramPrefix)]), paramPrefix) {
			names = append(names, string(k))
		}
	}
	for _, k := range names {
		h.Del(k)
	}
}

// paramPrefix begins the name of each header that mirrors a tool's
// parameter.
const paramPrefix = "Mcp-Param-"

// Send sends req and returns the response, its body still streaming, for
// the caller to release; timeout, if positive, bounds the wait for its
// headers.
func (e *Endpoint) Send(req *fasthttp.Request, timeout time.Duration) (*fasthttp.Response, error) {
	resp := fasthttp.AcquireResponse()
	if p, ok := req.BodyStream().(*Posting); ok {
		p.resp = resp // its connection, once given, is what Cut closes
		defer func() { p.resp = nil }()
	}
	var err error
	if timeout > 0 {
		err = e.Client.DoTimeout(req, resp, timeout)
	} else {
		err = e.Client.Do(req, resp)
	}
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		return nil, err
	}
	return resp, nil
}

// Do builds r, sends it and returns the response, its body still
// streaming, for the caller to release; timeout, if positive, bounds the
// wait for its headers.
func (e *Endpoint) Do(r Request, timeout time.Duration) (*fasthttp.Response, error) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req) // closes Written, if the body was never written
	e.Build(req, r)
	return e.Send(req, timeout)
}

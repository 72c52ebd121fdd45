package httpx

import (
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/origin"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/resourcemeta"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// The sidecar is transparent to a client's own OAuth (MCP authorization):
// the client's Authorization header goes upstream as it is, as every
// header does, and the upstream's 401s and 403s come back as they are,
// but for what names the upstream's own URL. The protected resource
// metadata (RFC 9728) that the client discovers is relayed from the
// upstream with its resource set to the sidecar's endpoint (the client
// checks it is the resource it asked for), and the resource_metadata of a
// WWW-Authenticate challenge points at that relayed document.

// metadataTimeout bounds the upstream's answer to a metadata request.
const metadataTimeout = 10 * time.Second

// maxMetadata bounds the metadata document relayed.
const maxMetadata = 64 << 10

// serveResourceMetadata relays a GET of the protected resource metadata
// to the upstream, and reports whether the request was one (any path
// under resourcemeta.WellKnown).
func (s *Sidecar) serveResourceMetadata(ctx *fasthttp.RequestCtx) bool {
	rest, ok := strings.CutPrefix(string(ctx.Path()), resourcemeta.WellKnown)
	if !ok || rest != "" && rest[0] != '/' {
		return false
	}
	switch {
	case !s.allowed(ctx):
	case s.Upstream == "": // a stdio server: no OAuth to discover
		ctx.Error("not found", fasthttp.StatusNotFound)
	case !ctx.IsGet() && !ctx.IsHead():
		ctx.Response.Header.Set("Allow", "GET, HEAD")
		ctx.Error("method not allowed", fasthttp.StatusMethodNotAllowed)
	default:
		s.relayMetadata(ctx, rest)
	}
	return true
}

// relayMetadata fetches the upstream's metadata for the resource whose
// path is rest (the sidecar's endpoint stands for the upstream's) and
// answers with it, its resource rewritten.
func (s *Sidecar) relayMetadata(ctx *fasthttp.RequestCtx, rest string) {
	up := s.up.URL
	origin := up.Scheme + "://" + up.Host
	where := ""
	endpoint := rest == s.path || rest == "" && s.path == "/"
	if endpoint {
		rest = strings.TrimSuffix(up.Path, "/")
		if custom := s.metadataURL.Load(); custom != nil {
			where = *custom // where the upstream's challenge said it is
		}
	}
	if where == "" {
		where = origin + resourcemeta.WellKnown + rest
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(where)
	req.Header.Set("Accept", "application/json")
	if err := s.up.Client.DoTimeout(req, resp, metadataTimeout); err != nil {
		s.log.Warn("the upstream's protected resource metadata is unreachable", zap.String("error", upstream.Brief(err)))
		ctx.Error("the upstream MCP server is unreachable", fasthttp.StatusBadGateway)
		return
	}
	body := readBody(resp, maxMetadata)
	if resp.StatusCode() == fasthttp.StatusOK {
		resource, ours := origin+up.Path, s.publicBase(ctx)+s.path
		if rest == "" && !endpoint { // the root's document, which may name the origin
			resource, ours = origin, s.publicBase(ctx)
		}
		if out, ok := resourcemeta.Document(body, resource, ours); ok {
			body = out
		} else {
			s.log.Warn("the upstream's protected resource metadata names another resource: relayed as it is",
				zap.String("expected", resource))
		}
	}
	ctx.SetStatusCode(resp.StatusCode())
	ctx.SetContentTypeBytes(resp.Header.ContentType())
	if cc := resp.Header.Peek("Cache-Control"); len(cc) > 0 {
		ctx.Response.Header.SetBytesV("Cache-Control", cc)
	}
	ctx.SetBody(body)
}

// publicBase is the sidecar's base URL as the client reaches it.
func (s *Sidecar) publicBase(ctx *fasthttp.RequestCtx) string {
	if s.PublicURL != "" {
		return strings.TrimSuffix(s.PublicURL, "/")
	}
	return "http://" + string(ctx.Host())
}

// challenge returns a WWW-Authenticate value of the upstream's with its
// resource_metadata, when on the upstream's origin, pointed at the
// sidecar's relay of it.
func (s *Sidecar) challenge(ctx *fasthttp.RequestCtx, v []byte) []byte {
	up := s.up.URL
	origin := up.Scheme + "://" + up.Host + "/"
	ours := func(u string) bool {
		if !strings.HasPrefix(u, origin) {
			return false
		}
		if !strings.HasPrefix(u, origin+strings.TrimPrefix(resourcemeta.WellKnown, "/")) {
			s.metadataURL.Store(&u) // a place of the upstream's own choosing: the relay fetches it there
		}
		return true
	}
	path := s.path
	if path == "/" {
		path = ""
	}
	return resourcemeta.Challenge(v, ours, s.publicBase(ctx)+resourcemeta.WellKnown+path)
}

// copyResponseHeaders copies the upstream's response headers to the
// client's response, but for those of the hop and the body's length, and
// CORS headers, which are the sidecar's own; a WWW-Authenticate challenge
// names the sidecar's metadata (challenge), each challenge kept.
func (s *Sidecar) copyResponseHeaders(ctx *fasthttp.RequestCtx, src *fasthttp.Response) {
	for k, v := range src.Header.All() {
		switch {
		case upstream.Skipped(k, "content-length") || origin.IsCORSHeader(k):
		case strings.EqualFold(string(k), "WWW-Authenticate"):
			ctx.Response.Header.AddBytesKV(k, s.challenge(ctx, v))
		default:
			ctx.Response.Header.SetBytesKV(k, v)
		}
	}
}

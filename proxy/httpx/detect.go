package httpx

import (
	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// The upstream transports Sidecar.UpstreamTransport names (see
// upstream.TransportStreamable).
const (
	TransportStreamable = upstream.TransportStreamable
	TransportSSE        = upstream.TransportSSE
	TransportAuto       = upstream.TransportAuto
)

// targetOf returns the target s's configuration names, chosen once, at
// Provision: the relay in front of a Streamable HTTP upstream, sessions of
// lines in front of a stdio server or an HTTP+SSE upstream, or, when the
// upstream's transport is to be detected, a target that probes it at the
// first request and is then the one of the two it found.
func targetOf(s *Sidecar) target {
	switch {
	case s.Children == nil:
		return relay{s}
	case s.Children.runsCommand() || s.UpstreamTransport != upstream.TransportAuto:
		return lineUpstream{s}
	}
	return &detecting{s: s}
}

// detecting is the target of a sidecar whose upstream's transport is
// detected (http.upstream_transport: auto): each request goes to the
// target the probe found; until the upstream can be reached, it is
// relayed as Streamable HTTP (and fails as such), and the next one probes
// again.
type detecting struct {
	s   *Sidecar
	sse upstream.Asked[bool] // the upstream speaks HTTP+SSE
}

func (d *detecting) post(ctx *fasthttp.RequestCtx)   { d.now().post(ctx) }
func (d *detecting) get(ctx *fasthttp.RequestCtx)    { d.now().get(ctx) }
func (d *detecting) delete(ctx *fasthttp.RequestCtx) { d.now().delete(ctx) }
func (d *detecting) ready() error                    { return reachable(d.s.up.URL) }

func (d *detecting) lineServers() lineServers { return d.now().lineServers() }

// now returns the target requests go to: the one detected, or the relay
// while the upstream cannot be reached.
func (d *detecting) now() target {
	if d.detect() {
		return lineUpstream{d.s}
	}
	return relay{d.s}
}

// detect detects the upstream's transport once, and reports whether it is
// HTTP+SSE.
func (d *detecting) detect() bool {
	return d.sse.Get(func() (bool, error) {
		s := d.s
		sse, err := s.up.ProbeTransport(s.maxBody, s.log)
		if err != nil {
			s.log.Warn("cannot tell the upstream's transport yet: it cannot be reached; the next request tries again",
				zap.String("error", upstream.Brief(err)))
			return false, err
		}
		name := upstream.TransportStreamable // the names of http.upstream_transport
		if sse {
			name = upstream.TransportSSE
		}
		s.log.Info("upstream transport detected", events.Mark(events.UpstreamDetected), zap.String("transport", name))
		return sse, nil
	})
}

package httpx

import (
	"sync"
	"sync/atomic"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// detection remembers what the upstream was found to speak.
type detection struct {
	mu   sync.Mutex // held while probing: one probe at a time
	done atomic.Bool
	sse  bool // set before done
}

// modernity remembers whether the upstream speaks 2026-07-28.
type modernity struct {
	mu   sync.Mutex // held while asking: one question at a time
	done atomic.Bool
	yes  bool // set before done
}

// The upstream transports Sidecar.UpstreamTransport names (see
// upstream.TransportStreamable).
const (
	TransportStreamable = upstream.TransportStreamable
	TransportSSE        = upstream.TransportSSE
	TransportAuto       = upstream.TransportAuto
)

// viaChildren reports whether requests go to Children: a stdio server, or
// an HTTP+SSE upstream (as told, or as detected).
func (s *Sidecar) viaChildren() bool {
	switch {
	case s.Children == nil:
		return false
	case s.Children.Dial == nil || s.UpstreamTransport != upstream.TransportAuto:
		return true
	}
	return outbound{s}.detectSSE()
}

// detectSSE detects the upstream's transport once; until it can be reached,
// each request is relayed as Streamable HTTP (and fails as such) and the
// next one probes again.
func (ob outbound) detectSSE() bool {
	d := &ob.s.detected
	if d.done.Load() {
		return d.sse
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.done.Load() {
		return d.sse
	}
	sse, err := ob.probe()
	if err != nil {
		ob.s.log.Warn("cannot tell the upstream's transport yet: it cannot be reached; the next request tries again",
			zap.String("error", upstream.Brief(err)))
		return false
	}
	d.sse = sse
	d.done.Store(true)
	name := upstream.TransportStreamable // the names of http.upstream_transport
	if sse {
		name = upstream.TransportSSE
	}
	ob.s.log.Info("upstream transport detected", events.Mark(events.UpstreamDetected), zap.String("transport", name))
	return sse
}

// probe finds out the sidecar's upstream's transport (probeTransport).
func (ob outbound) probe() (sse bool, err error) {
	return upstream.ProbeTransport(ob.s.client, ob.s.upstream, ob.s.maxBody, ob.s.log)
}

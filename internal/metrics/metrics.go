// Package metrics exposes mcp-cancel-proxy's counters in the Prometheus
// text format, with the Prometheus Go client, on the admin listener.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// Metrics holds the proxy's collectors. It implements proxy.Observer.
type Metrics struct {
	// Registry holds every collector, the Go runtime's and the process's included.
	Registry  *prometheus.Registry
	decisions *prometheus.CounterVec
	// byAction resolves the counters of the known actions up front, so that
	// Observe, on the hot path, costs one map lookup and an atomic add.
	byAction map[proxy.Action][2]prometheus.Counter
	// UpstreamErrors counts requests the upstream could not take or failed.
	UpstreamErrors prometheus.Counter
	// Cancels counts requests cancelled upstream, by source.
	Cancels *prometheus.CounterVec
}

// Gauges are read when scraped.
type Gauges struct {
	InFlight func() float64 // client requests in flight
	Sessions func() float64 // sessions the sidecar tracks
	Children func() float64 // stdio server processes running behind the sidecar
}

// New registers the collectors.
func New(g Gauges) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "mcp_cancel_proxy", Name: "messages_total",
			Help: "Messages by what the proxy did with them: forwarded, cancel accepted (forwarded), cancel dropped, " +
				"suppressed (late responses and progress of cancelled requests), dropped, answered by proxy, withdrawn before dispatch.",
		}, []string{"action", "from"}),
		UpstreamErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "mcp_cancel_proxy", Name: "upstream_errors_total",
			Help: "Requests the upstream could not be reached for, or answered with a server error.",
		}),
		Cancels: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "mcp_cancel_proxy", Name: "cancels_total",
			Help: "Requests cancelled upstream, by source: client, disconnect, session_end, shutdown.",
		}, []string{"source"}),
	}
	m.byAction = make(map[proxy.Action][2]prometheus.Counter)
	for _, a := range []proxy.Action{proxy.ActForwarded, proxy.ActCancelAccepted, proxy.ActCancelDropped,
		proxy.ActSuppressed, proxy.ActDropped, proxy.ActReplied, proxy.ActWithdrawn} {
		m.byAction[a] = [2]prometheus.Counter{
			m.decisions.WithLabelValues(string(a), proxy.Client.String()),
			m.decisions.WithLabelValues(string(a), proxy.Server.String()),
		}
	}
	m.Registry.MustRegister(m.decisions, m.UpstreamErrors, m.Cancels,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if g.InFlight != nil {
		m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "mcp_cancel_proxy", Name: "requests_in_flight", Help: "Client requests in flight."}, g.InFlight))
	}
	if g.Children != nil {
		m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "mcp_cancel_proxy", Name: "children", Help: "Stdio server processes running behind the sidecar."}, g.Children))
	}
	if g.Sessions != nil {
		m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "mcp_cancel_proxy", Name: "sessions", Help: "Sessions the sidecar tracks."}, g.Sessions))
	}
	return m
}

// Observe implements proxy.Observer.
func (m *Metrics) Observe(a proxy.Action, from proxy.Peer) {
	if c, ok := m.byAction[a]; ok && from <= proxy.Server {
		c[from].Inc()
		return
	}
	m.decisions.WithLabelValues(string(a), "proxy").Inc()
}

var _ proxy.Observer = (*Metrics)(nil)

// Cancelled counts one request cancelled upstream.
func (m *Metrics) Cancelled(source string) { m.Cancels.WithLabelValues(source).Inc() }

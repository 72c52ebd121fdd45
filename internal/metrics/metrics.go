// Package metrics exposes mcp-cancel-proxy's counters in the Prometheus
// text format, with the Prometheus Go client, on the admin listener.
package metrics

import (
	"sync"
	"time"

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
	// operations is mcp.server.operation.duration of the semantic
	// conventions for MCP, as the proxy observes it.
	operations *prometheus.HistogramVec
	tools      toolNames
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
				"suppressed (late responses and progress of cancelled requests), dropped, answered by proxy, withdrawn before dispatch, " +
				"silenced after the end (second answers, progress after the answer or under a token no request in flight carries).",
		}, []string{"action", "from"}),
		UpstreamErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "mcp_cancel_proxy", Name: "upstream_errors_total",
			Help: "Requests the proxy answered in the upstream's place: not reached, answered with a server error, or their answer spoiled or lost.",
		}),
		Cancels: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "mcp_cancel_proxy", Name: "cancels_total",
			Help: "Requests cancelled upstream, by source: client, deadline, client_timeout, disconnect, session_end, shutdown.",
		}, []string{"source"}),
		operations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "mcp_server_operation_duration_seconds",
			Help: "MCP request duration as the proxy observes it, from the client's request read to its answer relayed or its " +
				"cancel (OpenTelemetry semantic conventions for MCP: mcp.server.operation.duration). error_type is the " +
				"JSON-RPC error code, cancelled, or _OTHER.",
			Buckets: []float64{0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60, 120, 300},
		}, []string{"mcp_method_name", "gen_ai_tool_name", "error_type", "network_transport", "mcp_protocol_version"}),
	}
	m.byAction = make(map[proxy.Action][2]prometheus.Counter)
	for _, a := range []proxy.Action{proxy.ActForwarded, proxy.ActCancelAccepted, proxy.ActCancelDropped,
		proxy.ActSuppressed, proxy.ActDropped, proxy.ActReplied, proxy.ActWithdrawn, proxy.ActSilenced} {
		m.byAction[a] = [2]prometheus.Counter{
			m.decisions.WithLabelValues(string(a), proxy.Client.String()),
			m.decisions.WithLabelValues(string(a), proxy.Server.String()),
		}
	}
	m.Registry.MustRegister(m.decisions, m.UpstreamErrors, m.Cancels, m.operations,
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

// Operation records one request's duration (telemetry.Durations). Past
// maxToolNames distinct tools, a tool is labelled _OTHER: clients choose
// tool names, and each would be a series.
func (m *Metrics) Operation(method, tool, errorType, transport, version string, d time.Duration) {
	if !m.tools.admit(tool) {
		tool = "_OTHER"
	}
	m.operations.WithLabelValues(method, tool, errorType, transport, version).Observe(d.Seconds())
}

// maxToolNames bounds the tool names mcp_server_operation_duration_seconds
// labels apart.
const maxToolNames = 256

// toolNames are the tool names labelled so far.
type toolNames struct {
	mu    sync.Mutex
	names map[string]struct{}
}

// admit reports whether tool may be a label: one seen before, or a new
// one while there is room.
func (t *toolNames) admit(tool string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.names[tool]; ok || tool == "" {
		return true
	}
	if len(t.names) >= maxToolNames {
		return false
	}
	if t.names == nil {
		t.names = map[string]struct{}{}
	}
	t.names[tool] = struct{}{}
	return true
}

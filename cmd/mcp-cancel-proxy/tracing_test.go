package main

import (
	"testing"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/metrics"
)

// TestTelemetryOnlyWhenRead: without tracing, the operation durations are
// recorded only where an admin listener serves them: a sidecar without
// one (whose metrics the status page's gauges still need) gets no
// telemetry, so no span per request.
func TestTelemetryOnlyWhenRead(t *testing.T) {
	m := metrics.New(metrics.Gauges{})
	for _, c := range []struct {
		admin string
		want  bool
	}{{"", false}, {"127.0.0.1:9090", true}} {
		var cfg config.Config
		cfg.HTTP.Admin = c.admin
		tel, stop, err := startTelemetry(cfg, m, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		stop()
		if got := tel != nil; got != c.want {
			t.Errorf("admin %q: telemetry %v, want %v", c.admin, got, c.want)
		}
	}
}

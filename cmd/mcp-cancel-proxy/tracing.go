package main

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/metrics"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/telemetry"
)

// flushWait bounds the export of the spans still buffered at exit.
const flushWait = 5 * time.Second

// startTelemetry starts the traces the configuration (or the OTEL_*
// environment) asks for, and the MCP operation durations when m serves
// metrics, on the admin listener: without one nobody reads them, and
// recording them would cost every request a span. It returns nil
// telemetry when neither is asked for; stop exports the spans still
// buffered.
func startTelemetry(cfg config.Config, m *metrics.Metrics, log *zap.Logger) (t *telemetry.Telemetry, stop func(), err error) {
	var durations telemetry.Durations
	if m != nil && cfg.HTTP.Admin != "" {
		durations = m
	}
	tc := cfg.Tracing
	t, err = telemetry.New(context.Background(), telemetry.Config{Endpoint: tc.Endpoint, Protocol: tc.Protocol,
		Headers: tc.Headers, ServiceName: tc.ServiceName, Version: version()}, durations)
	if err != nil {
		return nil, func() {}, err
	}
	if !t.Tracing() {
		return t, func() {}, nil
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: spans not exported", zap.Error(err))
	}))
	log.Info("tracing: each request relayed is a span, exported over OTLP")
	return t, func() {
		ctx, cancel := context.WithTimeout(context.Background(), flushWait)
		defer cancel()
		if err := t.Shutdown(ctx); err != nil {
			log.Warn("tracing: spans still buffered at exit were not all exported", zap.Error(err))
		}
	}, nil
}

// Package telemetry follows the requests the proxy relays: as OpenTelemetry
// spans exported over OTLP (HTTP or gRPC), continuing the trace context
// each request carries in params._meta and passing the proxy's on, and as
// the MCP semantic conventions' operation durations. It implements
// proxy.Tracer; with neither traces nor durations asked for, no session
// gets one, and nothing here runs.
package telemetry

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// Protocols of the OTLP exporter.
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// Config says where traces go. The zero value exports nothing unless the
// standard OTEL_EXPORTER_OTLP_* variables name an endpoint.
type Config struct {
	// Endpoint is the collector's URL; empty leaves it to the environment.
	Endpoint string
	// Protocol is ProtocolHTTP or ProtocolGRPC; empty leaves it to the
	// environment, else ProtocolHTTP.
	Protocol string
	// Headers go with every export.
	Headers map[string]string
	// ServiceName is the resource's service.name; empty leaves it to
	// OTEL_SERVICE_NAME, else "mcp-cancel-proxy".
	ServiceName string
	// Version is the proxy's version, its service.version.
	Version string
}

// Enabled reports whether c, with the environment, asks for traces: an
// endpoint here or in OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
// OTEL_EXPORTER_OTLP_ENDPOINT, unless OTEL_SDK_DISABLED is true or
// OTEL_TRACES_EXPORTER is none.
func (c Config) Enabled() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") || os.Getenv("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	return c.Endpoint != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// protocol is the exporter's protocol: c's, else the environment's.
func (c Config) protocol() string {
	for _, p := range []string{c.Protocol, os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")} {
		if p != "" {
			return p
		}
	}
	return ProtocolHTTP
}

// Durations records the MCP operation durations (package metrics does,
// in the Prometheus registry).
type Durations interface {
	Operation(method, tool, errorType, transport, version string, d time.Duration)
}

// Telemetry makes the tracers of the proxy's sessions.
type Telemetry struct {
	provider  *sdktrace.TracerProvider // nil without traces
	tracer    trace.Tracer
	prop      propagation.TextMapPropagator
	durations Durations
}

// New returns the telemetry c and durations ask for: traces exported as c
// says if c.Enabled(), durations recorded if durations is not nil. It is
// nil, with no error, when neither is asked for.
func New(ctx context.Context, c Config, durations Durations) (*Telemetry, error) {
	t := &Telemetry{prop: propagation.TraceContext{}, durations: durations}
	if c.Enabled() {
		exp, err := exporter(ctx, c)
		if err != nil {
			return nil, err
		}
		name := c.ServiceName
		if name == "" {
			name = os.Getenv("OTEL_SERVICE_NAME")
		}
		if name == "" {
			name = "mcp-cancel-proxy"
		}
		res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
			attribute.String("service.name", name), attribute.String("service.version", c.Version)))
		if err != nil {
			return nil, err
		}
		t.provider = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		t.tracer = t.provider.Tracer("github.com/mcp-cancel-proxy/mcp-cancel-proxy", trace.WithInstrumentationVersion(c.Version))
	} else if durations == nil {
		return nil, nil
	}
	return t, nil
}

// exporter makes the OTLP exporter c asks for.
func exporter(ctx context.Context, c Config) (sdktrace.SpanExporter, error) {
	switch p := c.protocol(); p {
	case ProtocolHTTP:
		var opts []otlptracehttp.Option
		if c.Endpoint != "" {
			u, err := url.Parse(c.Endpoint)
			if err != nil {
				return nil, err
			}
			if u.Path == "" || u.Path == "/" {
				u.Path = "/v1/traces" // as the environment variable OTEL_EXPORTER_OTLP_ENDPOINT is read
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(u.String()))
		}
		if len(c.Headers) > 0 {
			opts = append(opts, otlptracehttp.WithHeaders(c.Headers))
		}
		return otlptracehttp.New(ctx, opts...)
	case ProtocolGRPC:
		var opts []otlptracegrpc.Option
		if c.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(c.Endpoint))
		}
		if len(c.Headers) > 0 {
			opts = append(opts, otlptracegrpc.WithHeaders(c.Headers))
		}
		return otlptracegrpc.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("OTLP protocol %q is not one of %s, %s", p, ProtocolHTTP, ProtocolGRPC)
	}
}

// Tracing reports whether spans are exported.
func (t *Telemetry) Tracing() bool { return t != nil && t.provider != nil }

// Shutdown exports the spans still buffered, within ctx.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	if !t.Tracing() {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// Session returns the tracer of one session over transport ("pipe" for
// stdio, "tcp" for HTTP, as network.transport names them); nil if t is.
func (t *Telemetry) Session(transport string) proxy.Tracer {
	if t == nil {
		return nil
	}
	return &session{t: t, transport: transport}
}

// SessionFunc returns a maker of such tracers, or nil if t is nil: for a
// transport that makes sessions as it goes.
func (t *Telemetry) SessionFunc(transport string) func() proxy.Tracer {
	if t == nil {
		return nil
	}
	return func() proxy.Tracer { return t.Session(transport) }
}

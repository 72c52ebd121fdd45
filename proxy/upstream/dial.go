package upstream

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// Upstream transports (Sidecar.UpstreamTransport).
const (
	// TransportStreamable is Streamable HTTP (protocol 2025-03-26 and
	// later): the sidecar relays each request.
	TransportStreamable = "streamable"
	// TransportSSE is the 2024-11-05 HTTP+SSE transport, served through
	// Children, whose Dial opens the upstream's event stream.
	TransportSSE = "sse"
	// TransportAuto detects which of the two the upstream speaks, at the
	// first request, as the spec tells clients to: POST initialize; on 400,
	// 404 or 405, GET the URL and expect an endpoint event.
	TransportAuto = "auto"
)

// probeWait bounds each step of the detection.
const probeWait = 10 * time.Second

// probeInitialize is the detection's initialize request: of the newest
// revision that initializes (a server of an older one answers with its
// own, as version negotiation asks), with the _meta and the headers that
// 2026-07-28 asks of every request (a server of an older one ignores them).
const probeInitialize = `{"jsonrpc":"2.0","id":"mcp-cancel-proxy-probe","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"mcp-cancel-proxy","version":"probe"},` +
	`"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"mcp-cancel-proxy","version":"probe"}}}}`

// Options are what NewEndpoint makes its client of an upstream with
// (and Dial its sessions).
type Options struct {
	MaxBody   int // an answer or an event at most (zero: the default)
	MaxHeader int // the response headers at most (zero: the default)
	// Headers are added to every request (an API key, a bearer token).
	Headers []Header
	// KeepRevision sends a 2025 client's requests as they are, never
	// upgraded to 2026-07-28 (http.upgrade_stateless: false).
	KeepRevision bool
	// ProxyFromEnv reaches the upstream through HTTPS_PROXY/HTTP_PROXY (as
	// NO_PROXY allows; never for a loopback upstream).
	ProxyFromEnv bool
	// Idle is how long a connection is kept unused (keepalive.DefaultIdle
	// if zero).
	Idle time.Duration
	// CAFile, if set, is a PEM file of CA certificates trusted for the
	// upstream's TLS besides the system's.
	CAFile string
	// Auth, if set, signs the requests in (AddAuth).
	Auth Authorizer
	// OnUpstreamError, if set, is called for each request the proxy
	// answers in the upstream's place (not reached, spoiled or lost).
	OnUpstreamError func()
}

// NewEndpoint returns the endpoint at rawURL with the one client that
// reaches it, made as o says: every client of the proxy's of one server
// (the bridge's, the sidecar's relay and its sessions of lines) is made
// here, so that none lacks what another has (a CA file, the environment's
// proxy, the added headers).
func NewEndpoint(rawURL string, o Options) (Endpoint, error) {
	u, err := parseUpstream(rawURL)
	if err != nil {
		return Endpoint{}, err
	}
	client := NewClient(o.MaxBody, o.MaxHeader)
	client.MaxIdleConnDuration = cmp.Or(o.Idle, client.MaxIdleConnDuration)
	AddHeaders(client, o.Headers)
	if o.Auth != nil {
		AddAuth(client, o.Auth)
	}
	if o.ProxyFromEnv {
		if err := UseProxyFromEnv(client, IsTLSURL(rawURL)); err != nil {
			return Endpoint{}, err
		}
	}
	if o.CAFile != "" {
		if err := UseCAFile(client, o.CAFile); err != nil {
			return Endpoint{}, err
		}
	}
	return Endpoint{URL: u, Client: client}, nil
}

// Dial opens a session of the MCP server at rawURL, as a Conn,
// speaking transport (TransportAuto: found out first, by probeTransport):
// what a stdio client needs to reach an HTTP server.
func Dial(rawURL, transport string, o Options, log *zap.Logger) (Conn, error) {
	ep, err := NewEndpoint(rawURL, o)
	if err != nil {
		return nil, err
	}
	maxBody, keepRevision := o.MaxBody, o.KeepRevision
	if transport == TransportAuto {
		sse, err := ep.ProbeTransport(maxBody, log)
		if err != nil {
			return nil, fmt.Errorf("finding out the upstream's transport: %w", err)
		}
		transport = TransportStreamable
		if sse {
			transport = TransportSSE
		}
		log.Info("upstream transport detected", events.Mark(events.UpstreamDetected), zap.String("transport", transport))
	}
	var d Dialer = &StreamableUpstream{Endpoint: ep, MaxBodySize: maxBody, KeepRevision: keepRevision, OnUpstreamError: o.OnUpstreamError}
	if transport == TransportSSE {
		d = &SSEUpstream{URL: ep.URL, Client: ep.Client, MaxBodySize: maxBody, OnUpstreamError: o.OnUpstreamError}
	}
	return d.Dial(log)
}

// ProbeTransport POSTs initialize to the endpoint; on 400, 404 or 405 it
// reports whether a GET opens an event stream that names an endpoint (an
// HTTP+SSE server's). A session the initialize opened is deleted.
func (e *Endpoint) ProbeTransport(maxBody int, log *zap.Logger) (sse bool, err error) {
	var probe framing.Frame
	probe.Parse([]byte(probeInitialize))
	resp, err := e.Do(Request{Body: []byte(probeInitialize), Msg: &probe.Msgs[0]}, probeWait)
	if err != nil {
		return false, err
	}
	status := resp.StatusCode()
	session := strings.Clone(string(Peek(resp.Header.All(), SessionHeader)))
	ReadHead(resp)
	switch status {
	case fasthttp.StatusBadRequest, fasthttp.StatusNotFound, fasthttp.StatusMethodNotAllowed:
		up := &SSEUpstream{URL: e.URL, Client: e.Client, MaxBodySize: maxBody, EndpointWait: probeWait}
		c, err := up.Open(zap.NewNop())
		if err != nil {
			log.Debug("the upstream refused initialize and is no HTTP+SSE server either", zap.Int("status", status),
				zap.String("error", Brief(err)))
			return false, nil
		}
		c.Close()
		return true, nil
	}
	if session != "" { // a session the proxy opened for itself
		if resp, err := e.Do(Request{Method: fasthttp.MethodDelete, Session: session}, probeWait); err == nil {
			ReadHead(resp)
		}
	}
	return false, nil
}

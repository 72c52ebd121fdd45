// Package config loads mcp-cancel-proxy's YAML configuration file: strict
// (unknown keys and wrong types are errors naming the line), defaulted, and
// validated with every problem reported at once.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/keepalive"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/child"
)

// Config is the whole configuration. Every field's default is stated on it
// and set by Defaults.
type Config struct {
	Log    Log    `yaml:"log"`
	Limits Limits `yaml:"limits"`
	Ledger Ledger `yaml:"ledger"`
	Child  Child  `yaml:"child"`
	HTTP   HTTP   `yaml:"http"`
	// Policy is the per-tool policy: deadlines, hooks, queues, escalation.
	Policy policy.Policy `yaml:"policy"`
	// Audit is where the audit trail goes.
	Audit policy.Audit `yaml:"audit"`
	// Cluster makes the proxy a member of a fleet. Default: none.
	Cluster Cluster `yaml:"cluster"`
	// Tracing exports OpenTelemetry traces. Default: off, unless the
	// standard OTEL_EXPORTER_OTLP_* environment variables name a collector.
	Tracing Tracing `yaml:"tracing"`
	// Path is the file the configuration was loaded from, if any (for a
	// reload on SIGHUP).
	Path string `yaml:"-"`
	// Warnings are what Parse found valid but likely wrong (a rule an
	// earlier one shadows), each as "name:line:column: setting: warning: what".
	Warnings []string `yaml:"-"`
	// MissingPrograms are the exec hooks whose program is not found on
	// this machine, each as "name:line:column: setting: what" (validate
	// warns of them, or with --strict refuses the file: configurations are
	// often checked on another machine than the one they run on).
	MissingPrograms []string `yaml:"-"`
}

// Tracing configures the OpenTelemetry traces: one span per request
// relayed, continuing the trace context in the request's params._meta.
// What is not set here is read from the standard OTEL_* environment
// variables (OTEL_EXPORTER_OTLP_ENDPOINT, _PROTOCOL, _HEADERS,
// OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER...).
type Tracing struct {
	// Endpoint is the OTLP collector's URL: http://host:4318 for
	// http/protobuf (the /v1/traces path is added to a URL without one),
	// http://host:4317 for grpc; https:// for TLS. Default empty: the
	// environment decides, and without an endpoint there, no traces.
	Endpoint string `yaml:"endpoint"`
	// Protocol is http/protobuf or grpc. Default: the environment's, else
	// http/protobuf.
	Protocol string `yaml:"protocol"`
	// Headers go with every export (a collector's API key, say).
	Headers map[string]string `yaml:"headers"`
	// ServiceName is the traces' service.name. Default: OTEL_SERVICE_NAME,
	// else mcp-cancel-proxy.
	ServiceName string `yaml:"service_name"`
}

// Cluster configures the fleet the proxy is a member of: off unless NATS
// is set.
type Cluster struct {
	// NATS is the NATS server URL (several, comma-separated), with
	// JetStream: hook jobs go to a work queue there that every replica
	// takes jobs from. A password in the URL is never logged; better, use
	// CredentialsFile or the MCP_CANCEL_PROXY_NATS_TOKEN variable.
	NATS string `yaml:"nats"`
	// CredentialsFile is a NATS credentials (.creds) file.
	CredentialsFile string `yaml:"credentials_file"`
	// AckWait is how long a replica may hold a hook job without a word
	// (it says one every third of it while it works) before the others
	// get it. Default 60s.
	AckWait time.Duration `yaml:"ack_wait"`
	// SlotLease is how long a fleet-wide max_concurrent slot stays held
	// after its replica last renewed it (every third of it): a replica
	// that dies gives its slots up after this long. Default 30s.
	SlotLease time.Duration `yaml:"slot_lease"`
	// MaxDeliver bounds how often one hook job is delivered to the fleet's
	// replicas: a job that no replica can run (its hook is in no replica's
	// configuration: a forged job, or one left over from a changed
	// configuration) is then kept as an orphan instead of circulating for
	// ever. It must leave room for every hook's retries. Default 120.
	MaxDeliver int `yaml:"max_deliver"`
}

// OAuth configures the bridge's sign-in to an upstream that wants an OAuth
// access token.
type OAuth struct {
	// Mode is "auto" (the default): the bridge signs in when the upstream
	// answers 401 with a bearer challenge, runs the authorization flow in
	// the user's browser and keeps the token; "start": as auto, and it
	// signs in as it starts, before the client's first request, unless a
	// token is kept (as "mcp-cancel-proxy auth login" does);
	// "client_credentials": it
	// signs in with the client credentials grant, for machine use (no
	// user; client_id and client_secret_file required); or "off": a 401 is
	// an error. Never with an Authorization header of upstream_headers.
	Mode string `yaml:"mode"`
	// ClientID and ClientSecretFile name a client registered beforehand at
	// the authorization server (the secret is the file's first line).
	// Default: dynamic client registration (RFC 7591).
	ClientID         string `yaml:"client_id"`
	ClientSecretFile string `yaml:"client_secret_file"`
	// ClientKeyFile, with mode client_credentials, is a PEM file with the
	// client's private key (EC P-256 or RSA): the client authenticates
	// with an assertion it signs (private_key_jwt, RFC 7523), not a
	// secret.
	ClientKeyFile string `yaml:"client_key_file"`
	// ClientMetadataURL is the public HTTPS URL of the client's metadata
	// document, its client ID where the authorization server takes client
	// ID metadata documents. Default none.
	ClientMetadataURL string `yaml:"client_metadata_url"`
	// CallbackPort fixes the port of the redirect URI,
	// http://127.0.0.1:PORT/callback (for a client registered beforehand
	// with that URI). Default: the last sign-in's, else a free one.
	CallbackPort int `yaml:"callback_port"`
	// Store is the directory tokens and registrations are kept in, one
	// file per server that only the user can read. Default: the user's
	// state directory ($XDG_STATE_HOME/mcp-cancel-proxy/auth, or
	// ~/.local/state/...; the configuration directory on macOS and
	// Windows).
	Store string `yaml:"store"`
	// Keyring is where tokens and client secrets are kept: auto (the
	// default) in the OS's credential store where one answers (the macOS
	// Keychain, Windows Credential Manager, the Secret Service on the
	// session's D-Bus), else in the user-only file of Store; on, in the
	// OS's store, an error at start if none answers; off, in the file.
	// The rest of each record (its server, client ID, expiry) stays in the
	// file either way.
	Keyring string `yaml:"keyring"`
	// AllowPrivate are the non-public addresses (IPs or CIDR prefixes:
	// private, link-local, carrier-grade NAT) the sign-in may fetch from
	// besides the server's own host: an authorization server inside a
	// cluster, for a machine bridge there. Every other fetch the sign-in
	// makes for what the server names is HTTPS or loopback, to a public
	// address, with no redirect into loopback or such space. Default none.
	AllowPrivate []string `yaml:"allow_private"`
}

// HTTP configures the Streamable HTTP sidecar, which runs when Listen is set.
type HTTP struct {
	// Listen is the address to serve on, such as 127.0.0.1:8080. Default
	// empty: the stdio wrapper runs instead.
	Listen string `yaml:"listen"`
	// Upstream is the upstream MCP endpoint's URL. Required with Listen.
	Upstream string `yaml:"upstream"`
	// UpstreamTransport is the transport the upstream speaks: auto (probed
	// at the first request, as the spec tells clients to), streamable
	// (Streamable HTTP, protocol 2025-03-26 and later) or sse (the
	// 2024-11-05 HTTP+SSE transport: Upstream is its event stream's URL).
	// Default auto.
	UpstreamTransport string `yaml:"upstream_transport"`
	// Path is the MCP endpoint served. Default /mcp.
	Path string `yaml:"path"`
	// PublicURL is the sidecar's own base URL as its clients reach it
	// (https://mcp.example.com, when a TLS proxy sits in front): the
	// protected resource metadata (RFC 9728) relayed from the upstream,
	// and the resource_metadata of its 401s, name the sidecar's MCP
	// endpoint under it, so that a client doing OAuth checks the resource
	// it asked for. Default: http:// and the Host header of the request.
	PublicURL string `yaml:"public_url"`
	// LegacySSEPath and LegacyMessagePath are the 2024-11-05 HTTP+SSE
	// transport's endpoints, served to old clients (in front of a stdio
	// server or an HTTP+SSE upstream). Default /sse and /message.
	LegacySSEPath     string `yaml:"legacy_sse_path"`
	LegacyMessagePath string `yaml:"legacy_message_path"`
	// AllowedOrigins lists the Origin values accepted besides none; "*"
	// accepts any. Default none.
	AllowedOrigins []string `yaml:"allowed_origins"`
	// UpstreamHeaders are added to every request the proxy sends the
	// upstream (the bridge's and the sidecar's): an API key, a bearer token.
	// A value may name environment variables as ${NAME} (an unset one is an
	// error), so that secrets stay out of the file; $$ is a $. Default none.
	UpstreamHeaders map[string]string `yaml:"upstream_headers"`
	// CAFile is a PEM file of CA certificates the bridge and the sidecar
	// trust for their upstream's TLS besides the system's (a private CA;
	// SSL_CERT_FILE works too). Default none.
	CAFile string `yaml:"ca_file"`
	// OAuth is how the bridge signs in to an upstream that wants an OAuth
	// access token (MCP's authorization).
	OAuth OAuth `yaml:"oauth"`
	// Proxy says whether the sidecar's requests to its upstream and every
	// webhook go through the HTTP proxy the environment names
	// (HTTPS_PROXY, HTTP_PROXY, NO_PROXY): "env", or "none" (the default,
	// so that a deployment's routes do not change with its environment).
	// The bridge always honours the environment; loopback never is proxied.
	Proxy string `yaml:"proxy"`
	// CancelGrace is how long a cancelled request's response stream stays
	// open for the server's nested cancels before the sidecar ends it.
	// Default 500ms.
	CancelGrace time.Duration `yaml:"cancel_grace"`
	// ShutdownGrace is how long, on SIGTERM, open requests may finish after
	// the listener closes. Default 5s.
	ShutdownGrace time.Duration `yaml:"shutdown_grace"`
	// DisconnectCancelAfter, when positive, makes a dropped response stream a
	// cancel in the 2025 protocol revisions if the client has not resumed
	// within it: for clients that close streams and never POST a cancel.
	// Default 0: off, as the spec says a disconnect is not a cancel.
	DisconnectCancelAfter time.Duration `yaml:"disconnect_cancel_after"`
	// UpgradeStateless sends the requests of a 2025 client that a stateless
	// upstream gave no session as 2026-07-28 requests, when the upstream
	// says (server/discover) it speaks that revision, so that closing a
	// request's stream, such a client's only cancel there, cancels it.
	// Default true.
	UpgradeStateless bool `yaml:"upgrade_stateless"`
	// MaxSessions caps the sessions, each with its own child, when a stdio
	// server is served over HTTP; initialize beyond it gets 503. Default 64.
	MaxSessions int `yaml:"max_sessions"`
	// MaxRelayedSessions caps the upstream sessions the sidecar relays (a
	// Streamable HTTP upstream's): an initialize beyond it gets 503 with
	// Retry-After; none is evicted. Default 10000.
	MaxRelayedSessions int `yaml:"max_relayed_sessions"`
	// LegacyInitWait is how long an old HTTP+SSE client's event stream may
	// stay open without the client POSTing initialize before it is closed.
	// Default 10s.
	LegacyInitWait time.Duration `yaml:"legacy_init_wait"`
	// MaxConnections bounds the connections the HTTP listener holds at
	// once: at the bound the idlest idle connection (between requests) is
	// closed for a new one, else the one that has been sending its request
	// the longest, and with neither the new one is. Default 16384.
	MaxConnections int `yaml:"max_connections"`
	// MaxConnectionsPerClient bounds one client's connections the same way
	// (an IPv6 client's by its /64), but those of TrustedProxies; never
	// more than half of what the descriptor limit allows. Default 4096.
	MaxConnectionsPerClient int `yaml:"max_connections_per_client"`
	// HeaderTimeout bounds reading a request's head, from its first byte
	// (a new connection's from its accept), on the HTTP and the admin
	// listener; the body then has its own 30 s. Default 10s.
	HeaderTimeout time.Duration `yaml:"header_timeout"`
	// TrustedProxies are the addresses (an IP or a CIDR prefix) of proxies
	// in front of the sidecar, such as an ingress, through which every
	// client shares one address: their connections are not bounded per
	// client (MaxConnections still bounds them). Default none: every
	// address is a client's own.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// UpstreamIdle is how long a connection to the upstream (the sidecar's,
	// the bridge's) or to a webhook is kept unused before the proxy closes
	// it: below the 5 s after which Node's HTTP server and uvicorn close
	// theirs, so that a call after a pause never goes on a connection the
	// server is closing. A server's own Keep-Alive: timeout= shortens it,
	// and a request that finds its connection closed before any of it is
	// written goes on a new one. Default 4s.
	UpstreamIdle time.Duration `yaml:"upstream_idle"`
	// SessionIdle ends a session after this long without a request and
	// with no stream open: a stdio session's child is stopped (whatever it
	// still runs for a client that left), an upstream session is forgotten
	// (never while a request of it is in flight). Default 30m.
	SessionIdle time.Duration `yaml:"session_idle"`
	// Admin is the address of the operations listener (/healthz, /readyz,
	// /metrics). Default empty: off.
	Admin string `yaml:"admin"`
	// AdminTokenFile is a file holding the admin listener's token (else the
	// MCP_CANCEL_PROXY_ADMIN_TOKEN variable): /status and /hooks then need
	// it (Authorization: Bearer TOKEN), and they need it always when the
	// listener binds beyond loopback. /healthz, /readyz and /metrics stay
	// open. Default: none.
	AdminTokenFile string `yaml:"admin_token_file"`
}

// Log configures the proxy's own logs, which go to stderr.
type Log struct {
	// Level is debug, info, warn or error. Default info.
	Level string `yaml:"level"`
	// Format is json or console. Default json.
	Format string `yaml:"format"`
	// Payloads adds, at debug level, the start of each malformed or
	// refused message, an upstream's error body and a failed hook's output
	// to the log. Default false: logs tell sizes and kinds, not contents.
	Payloads bool `yaml:"payloads"`
	// Events is a file the events feed is appended to, as JSON lines: the
	// moments a script or a test waits for (a listener ready, a server
	// gone, a cancel accepted, a late answer suppressed, a hook run), each
	// named in its "event" field, at every log level (docs/events.md).
	// Default "": none (the admin listener's /events streams them still).
	Events string `yaml:"events"`
}

// Limits bounds what the proxy accepts.
type Limits struct {
	// MaxFrameSize is the longest message line, in bytes ("64MiB" style
	// suffixes accepted). Default 64MiB.
	MaxFrameSize ByteSize `yaml:"max_frame_size"`
	// EventMemory bounds the memory all upstream event streams of the
	// sidecar may hold together for events larger than 64 KiB (about twice
	// each such event's size). Default 256MiB.
	EventMemory ByteSize `yaml:"event_memory"`
	// MaxRequestHeaderBytes bounds a client's request headers on the HTTP
	// listener (a 6 KB bearer token fits); beyond, 431 naming this setting.
	// Default 16KiB. Its buffer is held only while a request is read.
	MaxRequestHeaderBytes ByteSize `yaml:"max_request_header_bytes"`
	// MaxResponseHeaderBytes bounds the response headers of an upstream
	// (sidecar, bridge) and of a webhook; beyond, the request fails with an
	// error naming this setting. Default 64KiB.
	MaxResponseHeaderBytes ByteSize `yaml:"max_response_header_bytes"`
	// ReissueMemory and ReissueAnswers bound the suppressed answers that
	// reissue: join keeps for re-issues (each for its reissue_window),
	// across the process, in bytes and in entries: the oldest is dropped
	// first (a re-issue of its call then runs anew), and a session's are
	// dropped when it ends. Defaults 64MiB and 4096.
	ReissueMemory  ByteSize `yaml:"reissue_memory"`
	ReissueAnswers int      `yaml:"reissue_answers"`
	// TaskMemory and HostedTasks bound the tasks the proxy hosts for
	// clients (task: host), across the process: the bytes of their
	// results, and how many there are, working or not; the oldest
	// terminal task is dropped first, and a new one refused while all are
	// working. Defaults 64MiB and 1024.
	TaskMemory  ByteSize `yaml:"task_memory"`
	HostedTasks int      `yaml:"hosted_tasks"`
	// HostedTasksPerPrincipal bounds the hosted tasks of one principal
	// (a session; for requests without a session their credential, or
	// their address if they carry none), and of one client address, where
	// the sidecar serves several clients. Default 0: an eighth of
	// HostedTasks.
	HostedTasksPerPrincipal int `yaml:"hosted_tasks_per_principal"`
}

// Ledger configures how long cancelled requests are remembered.
type Ledger struct {
	// RetireAfter is how long a cancelled request's id and progress token are
	// remembered to recognise its late response. Default 10m.
	RetireAfter time.Duration `yaml:"retire_after"`
	// RetireMax bounds how many are remembered per direction. Default 65536.
	RetireMax int `yaml:"retire_max"`
}

// Child configures how the stdio server is stopped.
type Child struct {
	// TermAfter is the wait after closing the server's stdin before SIGTERM. Default 5s.
	TermAfter time.Duration `yaml:"term_after"`
	// KillAfter is the wait after SIGTERM before SIGKILL. Default 5s.
	KillAfter time.Duration `yaml:"kill_after"`
	// PassEnv names the proxy's own environment variables
	// (MCP_CANCEL_PROXY_*, such as the NATS token) that the server and the
	// exec hooks get: by default none of them, every other variable as is.
	PassEnv []string `yaml:"pass_env"`
}

// Defaults returns the configuration used when no file is given.
func Defaults() Config {
	return Config{
		Log: Log{Level: "info", Format: "json"},
		Limits: Limits{MaxFrameSize: framing.DefaultMaxFrameSize, EventMemory: 256 << 20, MaxRequestHeaderBytes: 16 << 10, MaxResponseHeaderBytes: 64 << 10, ReissueMemory: policy.DefaultReissueMemory, ReissueAnswers: policy.DefaultReissueAnswers,
			TaskMemory: policy.DefaultTaskMemory, HostedTasks: policy.DefaultHostedTasks},
		Ledger:  Ledger{RetireAfter: proxy.DefaultRetireAfter, RetireMax: proxy.DefaultRetireMax},
		Child:   Child{TermAfter: child.DefaultTermAfter, KillAfter: child.DefaultKillAfter, PassEnv: []string{}},
		HTTP:    HTTP{Path: "/mcp", LegacySSEPath: "/sse", LegacyMessagePath: "/message", UpstreamTransport: "auto", AllowedOrigins: []string{}, UpstreamHeaders: map[string]string{}, MaxSessions: 64, MaxRelayedSessions: 10_000, LegacyInitWait: 10 * time.Second, UpstreamIdle: keepalive.DefaultIdle, MaxConnections: 16384, MaxConnectionsPerClient: 4096, HeaderTimeout: 10 * time.Second, TrustedProxies: []string{}, SessionIdle: 30 * time.Minute, CancelGrace: 500 * time.Millisecond, ShutdownGrace: 5 * time.Second, UpgradeStateless: true, Proxy: "none", OAuth: OAuth{Mode: "auto", Keyring: "auto", AllowPrivate: []string{}}},
		Policy:  policy.Defaults(),
		Audit:   policy.Audit{Path: "stderr"},
		Cluster: Cluster{AckWait: 60 * time.Second, SlotLease: 30 * time.Second, MaxDeliver: 120},
	}
}

// Empty reports whether a configuration file's content holds no setting:
// nothing, or only blanks and comments.
func Empty(data []byte) bool {
	var n yaml.Node
	if err := yaml.Unmarshal(data, &n); err != nil {
		return false // invalid: Load says why
	}
	return len(n.Content) == 0 || (n.Content[0].Kind == yaml.MappingNode && len(n.Content[0].Content) == 0) ||
		(n.Content[0].Kind == yaml.ScalarNode && n.Content[0].Tag == "!!null")
}

// Load reads the file at path over the defaults and validates the result.
func Load(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, err
	}
	defer f.Close()
	cfg, err := Parse(path, f)
	cfg.Path = path
	return cfg, err
}

// Parse reads YAML from r over the defaults and validates the result. Every
// problem is reported at once, each as "name:line:column: what".
func Parse(name string, r io.Reader) (Config, error) {
	cfg := Defaults()
	data, err := io.ReadAll(r)
	if err != nil {
		return cfg, fmt.Errorf("%s: %w", name, err)
	}
	var root yaml.Node
	var decodeErr error
	if len(bytes.TrimSpace(data)) > 0 {
		if err := yaml.Unmarshal(data, &root); err != nil {
			return cfg, fmt.Errorf("%s: %w", name, err) // not YAML at all
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		decodeErr = dec.Decode(&cfg)
		var te *yaml.TypeError
		switch {
		case decodeErr == io.EOF:
			decodeErr = nil
		case decodeErr != nil && !errors.As(decodeErr, &te):
			return cfg, fmt.Errorf("%s: %w", name, decodeErr)
		}
	}
	// A yaml.TypeError leaves the rest decoded: validate it too, so that
	// every problem is reported at once.
	for _, p := range cfg.Policy.Programs("policy") {
		if _, err := exec.LookPath(p.Msg); err != nil {
			cfg.MissingPrograms = append(cfg.MissingPrograms, fmt.Sprintf("%s: %s: program %q not found on this machine", at(name, &root, p.Path), p.Path, p.Msg))
		}
	}
	// Warnings are found on a file with errors too: validate shows both.
	for _, w := range cfg.Policy.Warnings("policy") {
		cfg.Warnings = append(cfg.Warnings, fmt.Sprintf("%s: %s: warning: %s", at(name, &root, w.Path), w.Path, w.Msg))
	}
	if errs := locate(name, &root, decodeErr, cfg.Validate()); len(errs) > 0 {
		return cfg, errors.Join(errs...)
	}
	return cfg, nil
}

// at is "name:line:column" of the setting at path in the file, or name.
func at(name string, root *yaml.Node, path string) string {
	if n := find(root, path); n != nil {
		return fmt.Sprintf("%s:%d:%d", name, n.Line, n.Column)
	}
	return name
}

// Validate reports every invalid setting at once, each a *policy.Problem
// naming the setting.
func (c *Config) Validate() error {
	var errs []error
	bad := func(path, format string, a ...any) {
		errs = append(errs, policy.NewProblem(path, format, a...))
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "%q is not one of debug, info, warn, error", c.Log.Level)
	}
	if c.Log.Format != "json" && c.Log.Format != "console" {
		bad("log.format", "%q is not one of json, console", c.Log.Format)
	}
	if c.Limits.MaxFrameSize < 1024 || c.Limits.MaxFrameSize > 1<<30 {
		bad("limits.max_frame_size", "%d is outside 1KiB..1GiB", c.Limits.MaxFrameSize)
	}
	for _, h := range []struct {
		key string
		n   ByteSize
	}{{"limits.max_request_header_bytes", c.Limits.MaxRequestHeaderBytes}, {"limits.max_response_header_bytes", c.Limits.MaxResponseHeaderBytes}} {
		if h.n < 4<<10 || h.n > 16<<20 {
			bad(h.key, "%d is outside 4KiB..16MiB", h.n)
		}
	}
	if c.Limits.EventMemory < 1<<20 {
		bad("limits.event_memory", "%d is below 1MiB", c.Limits.EventMemory)
	}
	positive := map[string]time.Duration{"ledger.retire_after": c.Ledger.RetireAfter, "child.term_after": c.Child.TermAfter,
		"child.kill_after": c.Child.KillAfter, "http.session_idle": c.HTTP.SessionIdle,
		"http.shutdown_grace": c.HTTP.ShutdownGrace, "http.header_timeout": c.HTTP.HeaderTimeout}
	for _, key := range sortedKeys(positive) {
		if positive[key] <= 0 {
			bad(key, "must be positive, got %v", positive[key])
		}
	}
	if c.HTTP.CancelGrace < 0 { // 0: a cancelled request's stream ends at once
		bad("http.cancel_grace", "must not be negative, got %v", c.HTTP.CancelGrace)
	}
	if c.Ledger.RetireMax <= 0 {
		bad("ledger.retire_max", "must be positive, got %d", c.Ledger.RetireMax)
	}
	paths := map[string]string{"http.path": c.HTTP.Path, "http.legacy_sse_path": c.HTTP.LegacySSEPath,
		"http.legacy_message_path": c.HTTP.LegacyMessagePath}
	for _, key := range []string{"http.path", "http.legacy_sse_path", "http.legacy_message_path"} {
		if p := paths[key]; p == "" || p[0] != '/' {
			bad(key, "%q must start with /", p)
		}
	}
	if c.HTTP.Path == c.HTTP.LegacySSEPath || c.HTTP.Path == c.HTTP.LegacyMessagePath || c.HTTP.LegacySSEPath == c.HTTP.LegacyMessagePath {
		bad("http.path", "%q, %q and %q (http.path, legacy_sse_path, legacy_message_path) must differ",
			c.HTTP.Path, c.HTTP.LegacySSEPath, c.HTTP.LegacyMessagePath)
	}
	if c.HTTP.MaxSessions <= 0 {
		bad("http.max_sessions", "must be positive, got %d", c.HTTP.MaxSessions)
	}
	if c.HTTP.MaxRelayedSessions <= 0 {
		bad("http.max_relayed_sessions", "must be positive, got %d", c.HTTP.MaxRelayedSessions)
	}
	if c.Limits.ReissueMemory <= 0 {
		bad("limits.reissue_memory", "must be positive, got %d", c.Limits.ReissueMemory)
	}
	if c.Limits.ReissueAnswers <= 0 {
		bad("limits.reissue_answers", "must be positive, got %d", c.Limits.ReissueAnswers)
	}
	if c.Limits.TaskMemory <= 0 {
		bad("limits.task_memory", "must be positive, got %d", c.Limits.TaskMemory)
	}
	if c.Limits.HostedTasks <= 0 {
		bad("limits.hosted_tasks", "must be positive, got %d", c.Limits.HostedTasks)
	}
	if n := c.Limits.HostedTasksPerPrincipal; n < 0 || n > c.Limits.HostedTasks {
		bad("limits.hosted_tasks_per_principal", "must be 0 (an eighth of limits.hosted_tasks) or 1..%d, got %d", c.Limits.HostedTasks, n)
	}
	if c.HTTP.MaxConnections <= 0 {
		bad("http.max_connections", "must be positive, got %d", c.HTTP.MaxConnections)
	}
	if c.HTTP.MaxConnectionsPerClient <= 0 {
		bad("http.max_connections_per_client", "must be positive, got %d", c.HTTP.MaxConnectionsPerClient)
	}
	for _, addrs := range []struct {
		setting string
		list    []string
	}{{"http.oauth.allow_private", c.HTTP.OAuth.AllowPrivate}, {"http.trusted_proxies", c.HTTP.TrustedProxies}} {
		for i, p := range addrs.list {
			if _, err := ParsePrefix(p); err != nil {
				bad(fmt.Sprintf("%s[%d]", addrs.setting, i), "%v", err)
			}
		}
	}
	if c.HTTP.UpstreamIdle <= 0 {
		bad("http.upstream_idle", "must be positive, got %v", c.HTTP.UpstreamIdle)
	}
	if c.HTTP.LegacyInitWait <= 0 {
		bad("http.legacy_init_wait", "must be positive, got %v", c.HTTP.LegacyInitWait)
	}
	if c.HTTP.DisconnectCancelAfter < 0 {
		bad("http.disconnect_cancel_after", "must not be negative, got %v", c.HTTP.DisconnectCancelAfter)
	}
	c.HTTP.validateAddrs(bad)
	if c.Audit.Path == "" {
		bad("audit.path", "empty: name a file, stderr, or off")
	}
	if n := c.Cluster.NATS; n != "" {
		for _, one := range strings.Split(n, ",") {
			if u, err := url.Parse(strings.TrimSpace(one)); err != nil || u.Host == "" ||
				(u.Scheme != "nats" && u.Scheme != "tls" && u.Scheme != "ws" && u.Scheme != "wss") {
				bad("cluster.nats", "%q is not a nats://, tls://, ws:// or wss:// URL with a host", redactURL(one))
			}
		}
	}
	if c.Cluster.AckWait < 0 {
		bad("cluster.ack_wait", "must not be negative, got %v", c.Cluster.AckWait)
	}
	if c.Cluster.SlotLease < 0 {
		bad("cluster.slot_lease", "must not be negative, got %v", c.Cluster.SlotLease)
	}
	if n, r := c.Cluster.MaxDeliver, c.Policy.MaxRetries(); n <= 0 || (c.Cluster.NATS != "" && n <= r+1) {
		bad("cluster.max_deliver", "must be more than every hook's attempts (the most retries of a hook is %d, so at least %d), got %d", r, r+2, n)
	}
	if e := c.Tracing.Endpoint; e != "" {
		if u, err := url.Parse(e); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			bad("tracing.endpoint", "%q is not an http:// or https:// URL with a host", redactURL(e))
		}
	}
	if p := c.Tracing.Protocol; p != "" && p != "http/protobuf" && p != "grpc" {
		bad("tracing.protocol", "%q is not one of http/protobuf, grpc", p)
	}
	if c.Audit.NATSSubject != "" && c.Cluster.NATS == "" {
		bad("audit.nats_subject", "needs cluster.nats")
	}
	return errors.Join(append(errs, c.Policy.Validate("policy"))...)
}

// validateAddrs checks what the sidecar would refuse at start: a listen
// address it cannot bind, an upstream that is not an http(s) URL, an
// upstream with nowhere to serve it.  (An upstream without a listen address
// is checked by whoever knows the flags: the file may rely on --listen.)
func (h *HTTP) validateAddrs(bad func(path, format string, a ...any)) {
	if h.Listen != "" {
		host, port, err := net.SplitHostPort(h.Listen)
		n, perr := strconv.Atoi(port)
		switch {
		case err != nil:
			bad("http.listen", "%q is not host:port (%v)", h.Listen, err)
		case perr != nil || n < 0 || n > 65535:
			bad("http.listen", "%q: port %q is not a number from 0 to 65535", h.Listen, port)
		case host != "" && net.ParseIP(strings.Trim(host, "[]")) == nil && !validHostname(host):
			bad("http.listen", "%q: %q is not an IP address or a host name", h.Listen, host)
		}
	}
	if p := h.Proxy; p != "" && p != "env" && p != "none" {
		bad("http.proxy", "%q is not env or none", p)
	}
	switch m := h.OAuth.Mode; {
	case m != "" && m != "auto" && m != "start" && m != "off" && m != "client_credentials":
		bad("http.oauth.mode", "%q is not auto, start, client_credentials or off", m)
	case m == "client_credentials" && (h.OAuth.ClientID == "" || h.OAuth.ClientSecretFile == "" && h.OAuth.ClientKeyFile == ""):
		bad("http.oauth.mode", "client_credentials needs client_id, and client_secret_file or client_key_file")
	case h.OAuth.ClientSecretFile != "" && h.OAuth.ClientKeyFile != "":
		bad("http.oauth.client_key_file", "a client authenticates with a secret or a key, not both: client_secret_file is set too")
	case h.OAuth.ClientKeyFile != "" && m != "client_credentials":
		bad("http.oauth.client_key_file", "only with mode client_credentials")
	}
	if k := h.OAuth.Keyring; k != "" && k != "auto" && k != "on" && k != "off" {
		bad("http.oauth.keyring", "%q is not auto, on or off", k)
	}
	if p := h.OAuth.CallbackPort; p < 0 || p > 65535 {
		bad("http.oauth.callback_port", "%d is not a port from 1 to 65535", p)
	}
	if u := h.OAuth.ClientMetadataURL; u != "" {
		if pu, err := url.Parse(u); err != nil || pu.Scheme != "https" || strings.Trim(pu.Path, "/") == "" {
			bad("http.oauth.client_metadata_url", "%q must be an https URL with a path", u)
		}
	}
	if t := h.UpstreamTransport; t != "" && t != "auto" && t != "streamable" && t != "sse" {
		bad("http.upstream_transport", "%q is not auto, streamable or sse", t)
	}
	if h.PublicURL != "" {
		u, err := url.Parse(h.PublicURL)
		switch {
		case err != nil:
			bad("http.public_url", "%q is not a URL (%v)", h.PublicURL, err)
		case u.Scheme != "http" && u.Scheme != "https":
			bad("http.public_url", "%q: the scheme must be http or https, not %q", h.PublicURL, u.Scheme)
		case u.Host == "" || strings.TrimSuffix(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil:
			bad("http.public_url", "%q must be scheme://host[:port], with no path, query, fragment or user", h.PublicURL)
		}
	}
	if h.Upstream != "" {
		u, err := url.Parse(h.Upstream)
		switch {
		case err != nil:
			bad("http.upstream", "%q is not a URL (%v)", h.Upstream, err)
		case u.Scheme != "http" && u.Scheme != "https":
			bad("http.upstream", "%q: the scheme must be http or https, not %q", h.Upstream, u.Scheme)
		case u.Host == "":
			bad("http.upstream", "%q names no host", h.Upstream)
		}
	}
}

// redactURL returns a URL without its password, for messages.
func redactURL(s string) string {
	if u, err := url.Parse(strings.TrimSpace(s)); err == nil && u.User != nil {
		return u.Redacted()
	}
	return s
}

// validHostname reports whether s could be a DNS name.
func validHostname(s string) bool {
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || strings.Trim(label, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") != "" {
			return false
		}
	}
	return true
}

// ByteSize is a size in bytes, written as a number or with a unit suffix:
// B, KiB, MiB, GiB (powers of 1024) or KB, MB, GB (powers of 1000).
type ByteSize int

var units = []struct {
	suffix string
	mult   int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}

// ParseByteSize parses "64MiB", "1000000" or "4 KB".
func ParseByteSize(s string) (ByteSize, error) {
	s = strings.TrimSpace(s)
	given, mult := s, int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("invalid size %q (want a number of bytes, optionally with B, KiB, MiB, GiB, KB, MB or GB)", given)
	}
	return ByteSize(n * mult), nil
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseByteSize(n.Value)
	if err != nil { // a TypeError: the decoder goes on, and every problem is told
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: column %d: %v", n.Line, n.Column, err)}}
	}
	*b = v
	return nil
}

// String renders the size for flags and logs.
func (b ByteSize) String() string { return strconv.Itoa(int(b)) }

// Set implements flag.Value.
func (b *ByteSize) Set(s string) error {
	v, err := ParseByteSize(s)
	if err == nil {
		*b = v
	}
	return err
}

// ParsePrefix reads an address of http.trusted_proxies: an IP (a prefix
// of its whole length) or a CIDR prefix.
func ParsePrefix(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is neither an IP address nor a CIDR prefix", s)
	}
	return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
}

// TrustedPrefixes returns http.trusted_proxies as prefixes (validated).
func (h HTTP) TrustedPrefixes() []netip.Prefix { return prefixes(h.TrustedProxies) }

// AllowedPrefixes returns http.oauth.allow_private as prefixes
// (validated).
func (o OAuth) AllowedPrefixes() []netip.Prefix { return prefixes(o.AllowPrivate) }

// prefixes parses validated addresses (ParsePrefix).
func prefixes(all []string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range all {
		if p, err := ParsePrefix(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}

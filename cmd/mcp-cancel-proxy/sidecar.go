package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/actor"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/admin"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/connlimit"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/metrics"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/child"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// sidecar serves the Streamable HTTP sidecar until SIGINT or SIGTERM (or
// the end of ctx), then stops accepting, gives open requests the shutdown
// grace, and returns 0.
func sidecar(sigs *actor.Signals, cfg config.Config, argv []string, stderr io.Writer) int {
	log, feed, ok := startLog(cfg.Log, stderr)
	if !ok {
		return 1
	}
	defer feed.Close()
	defer log.Sync()
	tcp, err := net.Listen("tcp", cfg.HTTP.Listen)
	if err != nil {
		log.Error("cannot listen", zap.String("listen", cfg.HTTP.Listen), zap.Error(err))
		return 1
	}
	// Accepts go on through a shortage of descriptors; the connections are
	// bounded, in all and per client, the idlest idle closed for room.
	ln := connlimit.New(tcp, connlimit.Options{Max: cfg.HTTP.MaxConnections, MaxPerClient: cfg.HTTP.MaxConnectionsPerClient,
		Trusted: cfg.HTTP.TrustedPrefixes(), Log: log})
	sc, m := newSidecar(cfg, isLoopback(ln.Addr()), log)
	tel, stopTelemetry, err := startTelemetry(cfg, m, log)
	if err != nil {
		log.Error("cannot start tracing", zap.Error(err))
		return 1
	}
	defer stopTelemetry()
	sc.NewTracer = tel.SessionFunc("tcp")
	engine, err := sidecarPolicy(cfg, sc, m, argv, stderr, log)
	if err != nil {
		log.Error("cannot start the policy", zap.Error(err))
		return 1
	}
	defer engine.Shutdown()
	if err := sc.Provision(); err != nil {
		log.Error("bad sidecar configuration", zap.Error(err))
		return 1
	}
	handler, _ := sc.Handler() // provisioned: no error
	stopAdmin := func() {}
	if cfg.HTTP.Admin != "" {
		var running atomic.Pointer[policy.Engine]
		running.Store(engine)
		stop, err := admin.Serve(cfg.HTTP, m, sc.Ready, &running, feed, log)
		if err != nil {
			log.Error("cannot listen for admin", zap.String("admin", cfg.HTTP.Admin), zap.Error(err))
			return 1
		}
		stopAdmin = stop
	}
	srv := &fasthttp.Server{
		Handler:               ln.Handler(handler),
		Name:                  "mcp-cancel-proxy",
		MaxRequestBodySize:    int(cfg.Limits.MaxFrameSize),
		IdleTimeout:           idleTimeout,
		NoDefaultServerHeader: true,
		// An open event stream holds its write buffer; events are flushed
		// one by one and large bodies bypass the buffer, so 1 KiB costs
		// little and saves 3 KiB per stream.
		WriteBufferSize: 1 << 10,
		// The read buffer is the request headers' limit; it is returned
		// to the pool once a request is read (ReduceMemoryUsage), so an
		// open event stream does not hold it.
		ReadBufferSize:    int(cfg.Limits.MaxRequestHeaderBytes),
		ReduceMemoryUsage: true,
		// A session's GET stream is written off the connection loop, on a
		// goroutine the sidecar owns (httpx.Sidecar.KeepsHijackedConns).
		KeepHijackedConns: true,
		ErrorHandler:      requestError(log),
		NoDefaultDate:     true,
		CloseOnShutdown:   true,
		ConnState:         ln.ConnState,
	}
	connlimit.ReadTimeouts(srv, cfg.HTTP.HeaderTimeout, readTimeout)
	log.Info("sidecar listening", events.Mark(events.SidecarListening), zap.String("listen", ln.Addr().String()), zap.String("upstream", cfg.HTTP.Upstream),
		zap.String("path", cfg.HTTP.Path))
	f := &front{srv: srv, ln: ln, sc: sc, grace: cfg.HTTP.ShutdownGrace, log: log, shut: make(chan struct{})}
	rl := newReloader(cfg.Path, sigs.Hangups(), engine, log)
	var g actor.Group
	g.Add(sigs.Run, sigs.Stop)
	g.Add(f.run, f.stop)
	g.Add(rl.run, rl.stop)
	g.Add(actor.Until(stopAdmin))
	g.Run()
	return f.code
}

// front is the sidecar's HTTP listener as an actor of its group: it serves
// until it fails (status 1) or is stopped (0), then gives open requests the
// shutdown grace, cancels upstream what the grace did not see finish, and
// tells their clients so on their streams.
type front struct {
	srv      *fasthttp.Server
	ln       net.Listener
	sc       *httpx.Sidecar
	grace    time.Duration
	log      *zap.Logger
	stopping atomic.Bool
	shut     chan struct{} // closed once stop's shutdown has run its course
	code     int
}

func (f *front) run() error {
	err := f.srv.Serve(httpx.Listener(f.ln))
	if !f.stopping.Load() {
		f.log.Error("serving failed", zap.Error(err))
		f.code = 1
		return errFrontFailed
	}
	<-f.shut
	// What the grace did not see finish is cancelled upstream, not abandoned,
	// and its client told so on its stream before the process ends.
	f.sc.Cleanup("the proxy is shutting down")
	waitWritten(f.srv, time.Second)
	return nil
}

// stop stops accepting and waits, up to the grace, for open requests.
func (f *front) stop(why error) {
	defer close(f.shut)
	if why == errFrontFailed {
		return
	}
	f.stopping.Store(true)
	f.log.Info("shutting down", zap.String("why", why.Error()), zap.Duration("grace", f.grace))
	ctx, cancel := context.WithTimeout(context.Background(), f.grace)
	defer cancel()
	if err := f.srv.ShutdownWithContext(ctx); err != nil {
		f.log.Warn("open requests cut at the end of the shutdown grace", zap.Error(err))
	}
}

// errFrontFailed ends the sidecar's group when its listener fails.
var errFrontFailed = errors.New("the sidecar's listener failed")

// waitWritten waits, up to d, for the connections still open to end: the
// streams Cleanup ended write their last event (the proxy's -32000) first.
func waitWritten(srv *fasthttp.Server, d time.Duration) {
	for deadline := time.Now().Add(d); srv.GetOpenConnectionsCount() > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // fasthttp offers no signal for it; bounded by d
	}
}

// must returns v; err was checked when the flags were (an unset ${VAR}).
func must[T any](v T, _ error) T { return v }

// requestError answers a request fasthttp could not read: headers over
// limits.max_request_header_bytes get 431 naming the setting.
func requestError(log *zap.Logger) func(*fasthttp.RequestCtx, error) {
	return func(ctx *fasthttp.RequestCtx, err error) {
		if _, ok := errors.AsType[*fasthttp.ErrSmallBuffer](err); ok {
			log.Warn("request refused: its headers are larger than limits.max_request_header_bytes allows",
				zap.String("remote", ctx.RemoteAddr().String()))
			drain(ctx.Conn())
			ctx.Error("request headers larger than limits.max_request_header_bytes allows\n", fasthttp.StatusRequestHeaderFieldsTooLarge)
			return
		}
		if netErr, ok := errors.AsType[net.Error](err); ok && netErr.Timeout() {
			ctx.Error("request timeout\n", fasthttp.StatusRequestTimeout)
			return
		}
		ctx.Error("the request cannot be read\n", fasthttp.StatusBadRequest)
	}
}

// drain reads what the client still sends of a request that is refused
// unread (briefly, and 1 MiB at most), so that closing the connection after
// the answer does not reset it before the client has read the answer.
func drain(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	io.Copy(io.Discard, io.LimitReader(c, 1<<20))
}

// sidecarPolicy starts the policy engine and gives the sidecar's sessions
// their governors; with a stdio server (argv), or an HTTP+SSE upstream
// (known or maybe), it sets up the children, each session's with a
// governor of its own. The sidecar dials its upstream itself.
func sidecarPolicy(cfg config.Config, sc *httpx.Sidecar, m *metrics.Metrics, argv []string, stderr io.Writer, log *zap.Logger) (*policy.Engine, error) {
	server := upstreamName(cfg.HTTP.Upstream) // the host, never a path (or credentials) in a label
	if len(argv) > 0 {
		server = filepath.Base(argv[0])
	}
	popts, err := policyOptions(cfg, argv, log)
	if err != nil {
		return nil, err
	}
	pm := m.NewPolicy(server)
	popts.Metrics, sc.OnNotified = pm, pm.CancelNotified
	if popts.Fleet != nil { // cancels find the replica holding their request
		sc.Fleet = popts.Fleet
	}
	engine, err := policy.New(popts)
	if err != nil {
		return nil, err
	}
	sc.Governor, sc.LateWatch = engine.Governor, cfg.Policy.LateWindow
	var sessions atomic.Int64
	sopts := stdio.Options{MaxFrameSize: int(cfg.Limits.MaxFrameSize), RetireAfter: cfg.Ledger.RetireAfter, RetireMax: cfg.Ledger.RetireMax,
		LogPayloads: cfg.Log.Payloads, OnNotified: pm.CancelNotified, NewTracer: sc.NewTracer,
		Observer: observer(m), OnCancel: cancelCounter(m),
		Governor: func(a proxy.Actions) proxy.Governor {
			return engine.Governor(fmt.Sprintf("child%d", sessions.Add(1)))(a)
		}}
	sc.Legacy.Session = sopts
	if len(argv) > 0 || cfg.HTTP.UpstreamTransport != httpx.TransportStreamable { // a child per session, or an HTTP+SSE session per session
		sc.Children = &httpx.Children{Session: sopts}
		if len(argv) > 0 {
			sc.Children.Dial = &upstream.Command{Argv: argv, MaxFrameSize: int(cfg.Limits.MaxFrameSize),
				Options: child.Options{TermAfter: cfg.Child.TermAfter, KillAfter: cfg.Child.KillAfter, PassEnv: cfg.Child.PassEnv, Stderr: stderr}}
		}
	}
	return engine, nil
}

// newSidecar builds the sidecar and its metrics from the configuration.
func newSidecar(cfg config.Config, loopback bool, log *zap.Logger) (*httpx.Sidecar, *metrics.Metrics) {
	sc := &httpx.Sidecar{
		Upstream: cfg.HTTP.Upstream, UpstreamTransport: cfg.HTTP.UpstreamTransport, Path: cfg.HTTP.Path, PublicURL: cfg.HTTP.PublicURL, AllowedOrigins: cfg.HTTP.AllowedOrigins,
		Legacy:             &httpx.Legacy{SSEPath: cfg.HTTP.LegacySSEPath, MessagePath: cfg.HTTP.LegacyMessagePath, InitWait: cfg.HTTP.LegacyInitWait},
		MaxRelayedSessions: cfg.HTTP.MaxRelayedSessions, UpstreamHeaders: must(headersOf(cfg)),
		CheckHost: loopback, MaxBodySize: int(cfg.Limits.MaxFrameSize), MaxResponseHeaderBytes: int(cfg.Limits.MaxResponseHeaderBytes),
		CancelGrace: cmp.Or(cfg.HTTP.CancelGrace, httpx.NoCancelGrace), DisconnectCancelAfter: cfg.HTTP.DisconnectCancelAfter, Logger: log,
		KeepRevision: !cfg.HTTP.UpgradeStateless, ProxyFromEnv: cfg.HTTP.Proxy == "env", CAFile: cfg.HTTP.CAFile, KeepsHijackedConns: true, UpstreamIdle: cfg.HTTP.UpstreamIdle, TrustedProxies: cfg.HTTP.TrustedPrefixes(),
		SessionIdle: cfg.HTTP.SessionIdle, MaxSessions: cfg.HTTP.MaxSessions, EventMemory: int64(cfg.Limits.EventMemory),
		Tracker: proxy.TrackerOptions{RetireAfter: cfg.Ledger.RetireAfter, RetireMax: cfg.Ledger.RetireMax, LogPayloads: cfg.Log.Payloads},
	}
	m := metrics.New(metrics.Gauges{
		InFlight: func() float64 { return float64(sc.InFlight()) },
		Sessions: func() float64 { return float64(sc.Sessions()) },
		Children: func() float64 {
			if sc.Children == nil {
				return 0
			}
			return float64(sc.Children.Count())
		},
	})
	sc.Tracker.Observer, sc.OnUpstreamError, sc.OnCancel = m, m.UpstreamErrors.Inc, m.Cancelled
	return sc, m
}

const (
	// readTimeout bounds reading a request's body, after its head
	// (http.header_timeout).
	readTimeout = 30 * time.Second
	// idleTimeout closes keep-alive connections left idle, so that they
	// neither pile up nor hold up a shutdown.
	idleTimeout = 60 * time.Second
)

func isLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

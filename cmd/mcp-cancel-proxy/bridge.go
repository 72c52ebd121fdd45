package main

import (
	"context"
	"errors"
	"io"
	"net/url"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/actor"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream/signin"
)

// bridge serves a stdio client (on stdin and stdout) in front of an HTTP
// MCP server (--upstream without --listen): a stdio.Session between the
// client and a session of the upstream's, Streamable HTTP or HTTP+SSE. It
// returns 0 when the client or a signal ended the session, 1 when the
// upstream did. With --admin it serves the operations listener too: /healthz, /readyz
// (the upstream session lives), /metrics and the status page.
func bridge(sigs *actor.Signals, cfg config.Config, stdin io.ReadCloser, stdout io.WriteCloser, stderr io.Writer) int {
	log, feed, ok := startLog(cfg.Log, stderr)
	if !ok {
		return 1
	}
	defer feed.Close()
	defer log.Sync()
	actor.IgnoreSIGPIPE()
	hup := hangup(stdin)
	stdin, stdout = clientStdin(stdin), clientStdout(stdout)
	headers, _ := headersOf(cfg) // checked with the flags
	signIn, err := signInOf(cfg, headers, log)
	if err != nil {
		log.Error("cannot sign in to the upstream", zap.Error(err))
		refuseClient(stdin, stdout, "cannot sign in to the upstream MCP server: "+err.Error(), int(cfg.Limits.MaxFrameSize))
		return 1
	}
	// From here on, a signal or the client's leaving ends a sign-in that
	// waits for the user, even while the upstream is dialled: the bridge
	// stops at once, leaving no process behind its client.
	signalled := make(chan error, 1)
	go func() { signalled <- sigs.Run() }()
	stopSignIn := stopperOf(signIn)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case err := <-signalled:
			stopSignIn()
			signalled <- err // for the group's signal actor
		case <-hup:
			stopSignIn()
		case <-done:
		}
	}()
	var upstreamErrors func() // the metrics', once they are made: before the session's first line
	conn, err := upstream.Dial(cfg.HTTP.Upstream, cfg.HTTP.UpstreamTransport, upstream.Options{
		MaxBody: int(cfg.Limits.MaxFrameSize), MaxHeader: int(cfg.Limits.MaxResponseHeaderBytes),
		Headers: headers, KeepRevision: !cfg.HTTP.UpgradeStateless, ProxyFromEnv: true, CAFile: cfg.HTTP.CAFile, Auth: signIn, Idle: cfg.HTTP.UpstreamIdle,
		OnUpstreamError: func() {
			if upstreamErrors != nil {
				upstreamErrors()
			}
		}}, log)
	if err != nil {
		log.Error("cannot reach the upstream", zap.String("upstream", cfg.HTTP.Upstream), zap.Error(err))
		refuseClient(stdin, stdout, "cannot reach the upstream MCP server "+upstreamName(cfg.HTTP.Upstream)+": "+err.Error(), int(cfg.Limits.MaxFrameSize))
		return 1
	}
	back := stdio.NewLines(conn)
	var running atomic.Pointer[policy.Engine]
	m, pm, stopAdmin, err := startAdmin(cfg, upstreamName(cfg.HTTP.Upstream), func() error {
		select {
		case <-back.Exited():
			return errors.New("the upstream session has ended")
		default:
			return nil
		}
	}, &running, feed, log)
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		back.Stop()
		return 1
	}
	defer stopAdmin()
	if m != nil {
		upstreamErrors = m.UpstreamErrors.Inc
	}
	popts, err := policyOptions(cfg, nil, log)
	if err != nil {
		log.Error("cannot join the fleet", zap.Error(err))
		back.Stop()
		return 1
	}
	var notified func(time.Duration)
	if pm != nil {
		popts.Metrics, notified = pm, pm.CancelNotified
	}
	engine, err := policy.New(popts)
	if err != nil {
		log.Error("cannot start the policy", zap.Error(err))
		back.Stop()
		return 1
	}
	running.Store(engine)
	tel, stopTelemetry, err := startTelemetry(cfg, m, log)
	if err != nil {
		log.Error("cannot start tracing", zap.Error(err))
		back.Stop()
		return 1
	}
	defer stopTelemetry()
	sess := stdio.NewSession(stdio.Options{
		Logger: log, LogPayloads: cfg.Log.Payloads, MaxFrameSize: int(cfg.Limits.MaxFrameSize),
		RetireAfter: cfg.Ledger.RetireAfter, RetireMax: cfg.Ledger.RetireMax,
		OnClientClosed: func() { stopSignIn(); back.Stop() }, DrainWait: cfg.Child.TermAfter, Governor: engine.Governor("stdio"),
		NewTracer: tel.SessionFunc("pipe"), OnNotified: notified, Observer: observer(m), OnCancel: cancelCounter(m),
		DeferCancels: true,
	})
	var asked atomic.Bool
	code := 0
	rl := newReloader(cfg.Path, sigs.Hangups(), engine, log)
	var g actor.Group
	g.Add(func() error { return <-signalled }, sigs.Stop)
	g.Add(func() error {
		log.Info("bridging stdio to the upstream", zap.String("upstream", cfg.HTTP.Upstream))
		runErr := sess.Run(stdio.Conn{In: stdin, Out: stdout}, back.Conn())
		back.Stop()
		engine.Shutdown()
		logStats(log, sess.Stats())
		if errors.Is(runErr, stdio.ErrServerGone) && !asked.Load() {
			log.Error("the upstream ended the session")
			code = 1
		}
		return errRelayEnded
	}, func(why error) {
		if why == errRelayEnded {
			return
		}
		log.Info("stopping", zap.String("why", why.Error())) // SIGINT, SIGTERM, or the caller's end
		asked.Store(true)
		stopSignIn()
		sess.CancelAll(proxy.SourceShutdown, "the proxy is shutting down")
		back.Stop()
	})
	g.Add(rl.run, rl.stop)
	g.Add(actor.Until(stopAdmin))
	if cfg.HTTP.OAuth.Mode == "start" && signIn != nil {
		// Beside the relay: the client's requests wait for it as they
		// would for a sign-in a challenge started.
		ctx, cancel := context.WithCancel(context.Background())
		g.Add(func() error {
			signInAtStart(ctx, signIn, log)
			<-ctx.Done()
			return nil
		}, func(error) { cancel() })
	}
	g.Run()
	return code
}

// stopperOf returns what ends a's sign-ins (signin.Client.Stop), or a
// function that does nothing.
func stopperOf(a upstream.Authorizer) func() {
	if c, ok := a.(*signin.Client); ok {
		return c.Stop
	}
	return func() {}
}

// upstreamName is the short name of an upstream URL the metrics label it
// with: its host (and port), never its path or credentials.
func upstreamName(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil && u.Host != "" {
		return u.Host
	}
	return "upstream"
}

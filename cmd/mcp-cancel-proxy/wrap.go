package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/actor"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/admin"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/logcut"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/metrics"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/restart"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/fleet"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/child"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// wrap runs the stdio wrapper: the server as a child, the client on stdin
// and stdout. It returns 0 after a shutdown that the client or a signal
// asked for, and non-zero when the server exited on its own.
func wrap(sigs *actor.Signals, cfg config.Config, argv []string, stdin io.ReadCloser, stdout io.WriteCloser, stderr io.Writer) int {
	log, feed, ok := startLog(cfg.Log, stderr)
	if !ok {
		return 1
	}
	defer feed.Close()
	defer log.Sync()
	actor.IgnoreSIGPIPE()
	stdin, stdout = clientStdin(stdin), clientStdout(stdout)
	copts := child.Options{TermAfter: cfg.Child.TermAfter, KillAfter: cfg.Child.KillAfter, PassEnv: cfg.Child.PassEnv, Stderr: stderr, Logger: log}
	first, err := child.Start(argv, copts)
	if err != nil {
		log.Error("cannot start the server", zap.Error(err))
		refuseClient(stdin, stdout, "cannot start the MCP server: "+err.Error(), int(cfg.Limits.MaxFrameSize))
		return 1
	}
	link := restart.New(first, argv, copts, cfg.Policy.MaxRestarts, log, escalates(cfg.Policy))
	st := &stopper{current: link.Current, log: log, grace: cfg.Child.TermAfter}

	var running atomic.Pointer[policy.Engine]
	m, pm, stopAdmin, err := wrapperAdmin(cfg, argv, link, &running, feed, log)
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		link.Current().Stop()
		return 1
	}
	defer stopAdmin()
	tel, stopTelemetry, err := startTelemetry(cfg, m, log)
	if err != nil {
		log.Error("cannot start tracing", zap.Error(err))
		link.Current().Stop()
		return 1
	}
	defer stopTelemetry()
	popts, err := policyOptions(cfg, argv, log)
	if err != nil {
		log.Error("cannot join the fleet", zap.Error(err))
		link.Current().Stop()
		return 1
	}
	var notified func(time.Duration)
	if pm != nil {
		popts.Metrics = pm
		link.OnRestart = pm.Restarted
		notified = pm.CancelNotified
	}
	engine, err := policy.New(popts)
	if err != nil {
		log.Error("cannot start the policy", zap.Error(err))
		link.Current().Stop()
		return 1
	}
	running.Store(engine)
	sess := stdio.NewSession(stdio.Options{
		Logger:         log,
		LogPayloads:    cfg.Log.Payloads,
		MaxFrameSize:   int(cfg.Limits.MaxFrameSize),
		RetireAfter:    cfg.Ledger.RetireAfter,
		RetireMax:      cfg.Ledger.RetireMax,
		OnClientClosed: func() { st.stop("client closed its input") },
		DrainWait:      cfg.Child.TermAfter,
		Governor:       engine.Governor("stdio"),
		OnRestart:      link.Restart,
		OnNotified:     notified,
		NewTracer:      tel.SessionFunc("pipe"),
		Observer:       observer(m),
		OnCancel:       cancelCounter(m),
		DeferCancels:   true,
	})
	link.Session = sess
	st.cancelAll.Store(func() { sess.CancelAll(proxy.SourceShutdown, "the proxy is shutting down") })
	code := 0
	rl := newReloader(cfg.Path, sigs.Hangups(), engine, log)
	var g actor.Group
	g.Add(sigs.Run, sigs.Stop)
	g.Add(func() error {
		server := link.Conn(upstream.PipeOptions{MaxFrameSize: int(cfg.Limits.MaxFrameSize), DrainWait: cfg.Child.TermAfter, Logger: log})
		runErr := sess.Run(stdio.Conn{In: stdin, Out: stdout}, server)
		// Run reports ErrServerGone only when the server left while the client
		// was still there; that is a failure unless a signal asked for it.
		asked := st.signalled.Load()
		st.stop("server closed its output")
		p := link.Current()
		p.Stop()
		engine.Shutdown()
		logStats(log, sess.Stats())
		if errors.Is(runErr, stdio.ErrServerGone) && !asked {
			log.Error("the server exited on its own", zap.String("status", describe(p.Err())))
			code = exitStatus(p.Err())
		}
		return errRelayEnded
	}, func(err error) {
		if err != errRelayEnded {
			st.signal(err.Error())
		}
	})
	g.Add(rl.run, rl.stop)
	g.Add(actor.Until(stopAdmin))
	if hup := hangup(stdin); hup != nil {
		g.Add(st.onHangup(hup))
	}
	g.Run()
	return code
}

// errRelayEnded ends a mode's group when its relay has ended: the client
// or the server left, or a signal's stop ran its course.
var errRelayEnded = errors.New("the session has ended")

// stopper starts the server's stop ladder once, for whichever reason comes
// first: client EOF, a signal, the end of ctx, or the server leaving.
type stopper struct {
	current             func() *child.Process
	log                 *zap.Logger
	stopping, signalled atomic.Bool
	// cancelAll, once set, cancels what the client still waits for, on the
	// server, before a signal stops it.
	cancelAll atomic.Value // func()
	// grace bounds the waits for a relay that a server not reading its
	// stdin holds back.
	grace time.Duration
}

// signal stops the server for a signal or the end of ctx: what is in flight
// is cancelled first, so that its hooks run and its audit is written. The
// cancels wait for the client's relay, which a server that does not read
// its stdin may hold back: the ladder starts after the grace regardless,
// and unblocks it.
func (s *stopper) signal(why string) {
	s.signalled.Store(true)
	if f, ok := s.cancelAll.Load().(func()); ok && !s.stopping.Load() {
		done := make(chan struct{})
		go func() { f(); close(done) }()
		select {
		case <-done:
		case <-time.After(s.grace):
			s.log.Warn("the server does not take its input: stopping it before the cancels are written")
		}
	}
	s.stop(why)
}

func (s *stopper) stop(why string) {
	if s.stopping.CompareAndSwap(false, true) {
		s.log.Info("stopping the server", events.Mark(events.ServerStopping), zap.String("why", why))
		go s.current().Stop()
	}
}

// onHangup returns the actor that stops the server a grace after the
// client closes its end of stdin (hup): the relay sees the end of its input
// and stops the server, but one held back by a server that does not read
// cannot, so the ladder starts after the grace whatever the server does.
func (s *stopper) onHangup(hup <-chan struct{}) (execute func() error, interrupt func(error)) {
	quit := make(chan struct{})
	return func() error {
			select {
			case <-hup:
			case <-quit:
				return nil
			}
			select {
			case <-time.After(s.grace):
				s.stop("client closed its input")
			case <-quit:
				return nil
			}
			<-quit
			return nil
		}, func(error) {
			close(quit)
		}
}

func logStats(log *zap.Logger, st proxy.Stats) {
	log.Info("session ended", zap.Int64("forwarded", st.Forwarded), zap.Int64("cancels_forwarded", st.CancelsForwarded),
		zap.Int64("cancels_dropped", st.CancelsDropped), zap.Int64("withdrawn", st.Withdrawn),
		zap.Int64("responses_suppressed", st.ResponsesSuppressed), zap.Int64("progress_suppressed", st.ProgressSuppressed),
		zap.Int64("dropped", st.Dropped), zap.Int64("proxy_errors", st.ProxyErrors))
}

func describe(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// exitStatus maps the server's exit to the proxy's: its own non-zero code,
// or 1 when it died by a signal or exited 0 unasked.
func exitStatus(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() > 0 {
		return ee.ExitCode()
	}
	return 1
}

// startLog is a mode's logger and its events feed (log.events, and the
// admin listener's /events), teed beside the log; ok false when the
// events file cannot be opened, which the log says. The caller closes the
// feed once the mode has ended.
func startLog(c config.Log, w io.Writer) (log *zap.Logger, feed *events.Feed, ok bool) {
	feed, err := events.Open(c.Events)
	if err != nil {
		newLogger(c, w, nil).Error("cannot open the events file (log.events)", zap.Error(err))
		return nil, nil, false
	}
	return newLogger(c, w, feed), feed, true
}

// newLogger builds the zap logger that writes to stderr, and to feed the
// entries marked as events.
func newLogger(c config.Log, w io.Writer, feed *events.Feed) *zap.Logger {
	lvl, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		lvl = zapcore.InfoLevel
	}
	encCfg := zap.NewProductionEncoderConfig()
	// The audit trail's names and forms: "time", and durations with units.
	encCfg.TimeKey = "time"
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	encCfg.EncodeDuration = zapcore.StringDurationEncoder
	var enc zapcore.Encoder
	if c.Format == "console" {
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(encCfg)
	} else {
		enc = zapcore.NewJSONEncoder(encCfg)
	}
	enc = logcut.Encoder(enc) // a peer's 1 MiB id is not a 1 MiB line
	out := zapcore.Lock(zapcore.AddSync(w))
	// Warnings and errors repeat when a peer misbehaves in a loop: of each
	// message, the first 10 a second are written, then every 100th. Below
	// warn, nothing is dropped.
	quiet := zapcore.NewCore(enc, out, zap.LevelEnablerFunc(func(l zapcore.Level) bool { return l >= lvl && l < zapcore.WarnLevel }))
	loud := zapcore.NewSamplerWithOptions(zapcore.NewCore(enc, out, zap.LevelEnablerFunc(func(l zapcore.Level) bool {
		return l >= lvl && l >= zapcore.WarnLevel
	})), time.Second, 10, 100)
	return zap.New(zapcore.NewTee(quiet, loud, feed.Core())).Named("mcp-cancel-proxy")
}

// wrapperAdmin serves the admin listener for the stdio wrapper, when one is
// configured: /healthz, /readyz (the server runs) and /metrics with the
// policy's counters. It returns nil metrics when there is none, and an
// error when the listener cannot start (a busy port): the start fails, as
// the sidecar's does.
func wrapperAdmin(cfg config.Config, argv []string, link *restart.Link, engine *atomic.Pointer[policy.Engine], feed *events.Feed, log *zap.Logger) (*metrics.Metrics, *metrics.Policy, func(), error) {
	return startAdmin(cfg, filepath.Base(argv[0]), func() error {
		select {
		case <-link.Current().Exited():
			return errors.New("the server has exited")
		default:
			return nil
		}
	}, engine, feed, log)
}

// startAdmin serves the admin listener of a stdio front (the wrapper, the
// bridge) when one is configured; server names the server in the
// policy's metrics, ready tells /readyz.
func startAdmin(cfg config.Config, server string, ready func() error, engine *atomic.Pointer[policy.Engine], feed *events.Feed, log *zap.Logger) (*metrics.Metrics, *metrics.Policy, func(), error) {
	if cfg.HTTP.Admin == "" {
		return nil, nil, func() {}, nil
	}
	m := metrics.New(metrics.Gauges{})
	pm := m.NewPolicy(server)
	stop, err := admin.Serve(cfg.HTTP, m, ready, engine, feed, log)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("cannot listen for admin on %s (http.admin, --admin): %w", cfg.HTTP.Admin, err)
	}
	return m, pm, sync.OnceFunc(stop), nil
}

// observer returns what counts a session's decisions in m, if there is m.
func observer(m *metrics.Metrics) proxy.Observer {
	if m == nil {
		return nil
	}
	return m
}

// cancelCounter returns what counts a session's accepted cancels in m,
// if there is m.
func cancelCounter(m *metrics.Metrics) func(proxy.Source) {
	if m == nil {
		return nil
	}
	return func(src proxy.Source) { m.Cancelled(string(src)) }
}

// policyOptions returns the policy engine's options the configuration
// sets: unless policy.hooks.store says, the hook store is the server's own
// under the platform's directory (named after the stdio server's command
// line argv, or else the HTTP upstream), adopting what dead proxies left
// in the directory itself, where every server's jobs were once kept; with
// cluster.nats, the fleet's job queue (its token from the environment).
func policyOptions(cfg config.Config, argv []string, log *zap.Logger) (policy.Options, error) {
	o := policy.Options{Policy: cfg.Policy, Audit: cfg.Audit, Logger: log, LogPayloads: cfg.Log.Payloads, PassEnv: cfg.Child.PassEnv,
		MaxResponseHeaderBytes: int(cfg.Limits.MaxResponseHeaderBytes), WebhookProxyFromEnv: cfg.HTTP.Proxy == "env", WebhookIdle: cfg.HTTP.UpstreamIdle,
		ReissueMemory: int64(cfg.Limits.ReissueMemory), ReissueAnswers: cfg.Limits.ReissueAnswers,
		TaskMemory: int64(cfg.Limits.TaskMemory), HostedTasks: cfg.Limits.HostedTasks,
		HostedTasksPerPrincipal: cfg.Limits.HostedTasksPerPrincipal}
	if shared := config.DefaultHookStore(); shared != "" {
		url := cfg.HTTP.Upstream
		if len(argv) > 0 {
			url = ""
		}
		o.DefaultStore, o.SharedStore = filepath.Join(shared, config.ServerStoreName(argv, url)), shared
	}
	if c := cfg.Cluster; c.NATS != "" {
		q, err := fleet.Dial(fleet.Options{URL: c.NATS, CredentialsFile: c.CredentialsFile, AckWait: c.AckWait, Lease: c.SlotLease, MaxDeliver: c.MaxDeliver,
			Token: os.Getenv("MCP_CANCEL_PROXY_NATS_TOKEN"), Name: "mcp-cancel-proxy", Logger: log})
		if err != nil {
			return o, fmt.Errorf("cluster.nats %s: %w", fleet.Redacted(c.NATS), err)
		}
		log.Info("fleet member: hook jobs go to the fleet's queue", events.Mark(events.FleetMember), zap.String("nats", fleet.Redacted(c.NATS)))
		o.Fleet = q
	}
	return o, nil
}

// escalates reports whether a rule of the policy may restart the server:
// only then does the wrapper put a switchable link between the session and
// the server's pipes (it costs a copy of every frame the server sends).
func escalates(p policy.Policy) bool {
	for _, r := range p.Rules {
		if r.Escalate == "restart" {
			return true
		}
	}
	return false
}

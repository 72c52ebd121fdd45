package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync/atomic"
	"syscall"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/child"
)

// wrap runs the stdio wrapper: the server as a child, the client on stdin
// and stdout. It returns 0 after a shutdown that the client or a signal
// asked for, and non-zero when the server exited on its own.
func wrap(ctx context.Context, cfg config.Config, argv []string, stdin io.ReadCloser, stdout io.WriteCloser, stderr io.Writer) int {
	log := newLogger(cfg.Log, stderr)
	defer log.Sync()
	ignoreSIGPIPE()
	stdin, stdout = clientStdin(stdin), clientStdout(stdout)
	p, err := child.Start(argv, child.Options{
		TermAfter: cfg.Child.TermAfter, KillAfter: cfg.Child.KillAfter, Stderr: stderr, Logger: log})
	if err != nil {
		log.Error("cannot start the server", zap.Error(err))
		return 1
	}
	var stopping, signalled atomic.Bool
	stop := func(why string) {
		if stopping.CompareAndSwap(false, true) {
			log.Info("stopping the server", zap.String("why", why))
			go p.Stop()
		}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		select {
		case sig := <-sigs:
			signalled.Store(true)
			stop(sig.String())
		case <-p.Exited():
		case <-ctx.Done():
			signalled.Store(true)
			stop(ctx.Err().Error())
		}
	}()

	sess := proxy.NewSession(proxy.Options{
		Logger:       log,
		MaxFrameSize: int(cfg.Limits.MaxFrameSize),
		RetireAfter:  cfg.Ledger.RetireAfter,
		RetireMax:    cfg.Ledger.RetireMax,
		OnClientClosed: func() {
			stop("client closed its input")
		},
	})
	runErr := sess.Run(proxy.Conn{In: stdin, Out: stdout}, proxy.Conn{In: p.Stdout, Out: p.Stdin})
	// Run reports ErrServerGone only when the server left while the client
	// was still there; that is a failure unless a signal asked for it.
	asked := signalled.Load()
	stop("server closed its output")
	p.Stop()
	st := sess.Stats()
	log.Info("session ended", zap.Int64("forwarded", st.Forwarded), zap.Int64("cancels_forwarded", st.CancelsForwarded),
		zap.Int64("responses_suppressed", st.ResponsesSuppressed), zap.Int64("progress_suppressed", st.ProgressSuppressed))
	if errors.Is(runErr, proxy.ErrServerGone) && !asked {
		log.Error("the server exited on its own", zap.String("status", describe(p.Err())))
		return exitStatus(p.Err())
	}
	return 0
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

// newLogger builds the zap logger that writes to stderr.
func newLogger(c config.Log, w io.Writer) *zap.Logger {
	lvl, err := zapcore.ParseLevel(c.Level)
	if err != nil {
		lvl = zapcore.InfoLevel
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	if c.Format == "console" {
		encCfg.EncodeLevel = zapcore.CapitalLevelEncoder
		enc = zapcore.NewConsoleEncoder(encCfg)
	} else {
		enc = zapcore.NewJSONEncoder(encCfg)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.Lock(zapcore.AddSync(w)), lvl)).Named("mcp-cancel-proxy")
}

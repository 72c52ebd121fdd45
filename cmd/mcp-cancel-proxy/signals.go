package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// The process's signals are read in one place, here: in the proxy's modes
// (the wrapper, the sidecar, the bridge) SIGINT and SIGTERM end the context
// the mode runs under (its cause names the signal), and SIGHUP asks for a
// reload of the configuration, and the wrapper and the bridge ignore
// SIGPIPE. Each mode watches the context and the reload channel; none
// calls signal.Notify. The subcommands keep the
// signals' default actions (Ctrl-C ends `hooks list`).

// stopSignal is the cause of a context a signal ended.
type stopSignal struct{ os.Signal }

func (s stopSignal) Error() string { return s.String() }

// reloads receives a value for each SIGHUP (never on Windows), dropped
// while one is waiting to be read.
var reloads = make(chan struct{}, 1)

// signalContext returns a context that SIGINT or SIGTERM ends, with the
// signal as its cause, and starts passing SIGHUPs to reloads. stop ends
// both and lets the signals do what they do by default again.
func signalContext(parent context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case sig := <-sigs:
				if sig == syscall.SIGHUP {
					select {
					case reloads <- struct{}{}:
					default:
					}
					continue
				}
				cancel(stopSignal{sig})
			case <-done:
				return
			}
		}
	}()
	return ctx, func() { signal.Stop(sigs); close(done); cancel(context.Canceled) }
}

// ignoreSIGPIPE makes a write to a client that has gone fail with EPIPE
// instead of killing the proxy (Go's default for stdout), so that the
// wrapper and the bridge still shut down in order; for the process's life.
// (Windows has no SIGPIPE: a write to a client that has gone fails there.)
func ignoreSIGPIPE() { signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE) }

// why says what ended ctx: the signal's name, or the context's error.
func why(ctx context.Context) string {
	if cause := context.Cause(ctx); cause != nil {
		return cause.Error()
	}
	return ctx.Err().Error()
}

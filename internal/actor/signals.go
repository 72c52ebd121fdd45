package actor

import (
	"context"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// The process's signals are read here and nowhere else: in the proxy's
// modes (the wrapper, the sidecar, the bridge) SIGINT and SIGTERM end the
// group, SIGHUP asks for a reload of the configuration, and the wrapper and
// the bridge ignore SIGPIPE. The subcommands keep the signals' default
// actions (Ctrl-C ends `hooks list`).

// Stopped is the error of a group that a signal ended.
type Stopped struct{ os.Signal }

func (s Stopped) Error() string { return s.String() }

// Signals is the actor that reads the process's signals: SIGINT or
// SIGTERM ends it, with Stopped; the end of its context ends it with the
// context's cause; each SIGHUP is passed on to Hangups and it goes on.
type Signals struct {
	ctx  context.Context
	sigs chan os.Signal
	hups chan struct{}
	quit chan struct{}
	once sync.Once
}

// Catch starts catching the signals at once, so that one that comes while
// the mode is still starting is not lost (nor kills the process, leaving a
// child behind): it is acted on when Run starts.
func Catch(ctx context.Context) *Signals {
	s := &Signals{ctx: ctx, sigs: make(chan os.Signal, 4), hups: make(chan struct{}, 1), quit: make(chan struct{})}
	signal.Notify(s.sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	return s
}

// Hangups receives a value for each SIGHUP (never on Windows), dropped
// while one is waiting to be read.
func (s *Signals) Hangups() <-chan struct{} { return s.hups }

// Run reads the signals until SIGINT or SIGTERM, the end of the context, or
// Stop; once it has returned, the signals do what they do by default
// again.
func (s *Signals) Run() error {
	defer signal.Stop(s.sigs)
	for {
		select {
		case sig := <-s.sigs:
			if sig == syscall.SIGHUP {
				select {
				case s.hups <- struct{}{}:
				default:
				}
				continue
			}
			return Stopped{sig}
		case <-s.ctx.Done():
			return context.Cause(s.ctx)
		case <-s.quit:
			return nil
		}
	}
}

// Stop makes Run return, and stops catching signals if Run never ran. It
// is the actor's interrupt, and may be called more than once.
func (s *Signals) Stop(error) {
	s.once.Do(func() {
		close(s.quit)
		signal.Stop(s.sigs)
	})
}

// IgnoreSIGPIPE makes a write to a client that has gone fail with EPIPE
// instead of killing the process (Go's default for stdout), so that the
// wrapper and the bridge still shut down in order; for the process's life.
// (Windows has no SIGPIPE: a write to a client that has gone fails there.)
func IgnoreSIGPIPE() { signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE) }

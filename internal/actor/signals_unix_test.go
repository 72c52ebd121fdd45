//go:build unix

package actor_test

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/actor"
)

// TestSignals: SIGHUP is passed on to Hangups and the actor goes on;
// SIGTERM ends it with Stopped; the end of the context ends it with the
// context's cause.
func TestSignals(t *testing.T) {
	sigs := actor.Catch(context.Background())
	done := make(chan error, 1)
	go func() { done <- sigs.Run() }()
	self, _ := os.FindProcess(os.Getpid())
	self.Signal(syscall.SIGHUP)
	<-sigs.Hangups()
	self.Signal(syscall.SIGTERM)
	var stopped actor.Stopped
	if err := <-done; !errors.As(err, &stopped) || stopped.Signal != syscall.SIGTERM {
		t.Fatalf("ended with %v, want SIGTERM", err)
	}
	if stopped.Error() != "terminated" {
		t.Fatalf("Error() = %q", stopped.Error())
	}

	cause := errors.New("the caller is done")
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs = actor.Catch(ctx)
	cancel(cause)
	if err := sigs.Run(); err != cause {
		t.Fatalf("ended with %v, want the context's cause", err)
	}
}

// TestSignalBeforeRun: a SIGTERM that comes before Run starts (while a
// mode is still starting) is caught, not the process's end, and ends Run.
func TestSignalBeforeRun(t *testing.T) {
	sigs := actor.Catch(context.Background())
	self, _ := os.FindProcess(os.Getpid())
	self.Signal(syscall.SIGTERM)
	if err := sigs.Run(); !errors.As(err, new(actor.Stopped)) {
		t.Fatalf("ended with %v, want SIGTERM", err)
	}
}

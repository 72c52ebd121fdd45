package upstream_test

import (
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/child"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// TestCommandCountsItsProcesses: a Command starts a process per Dial and
// counts it until it has exited (before the options' own OnExit runs);
// its Grace is the stop ladder's first
// wait; without a command line it starts nothing and says why.
func TestCommandCountsItsProcesses(t *testing.T) {
	exits := make(chan struct{}, 2) // the options' own OnExit runs after the count's
	c := &upstream.Command{Argv: []string{"cat"}, Options: child.Options{TermAfter: time.Second, KillAfter: time.Second,
		OnExit: func() { exits <- struct{}{} }}}
	if g := c.Grace(); g != time.Second {
		t.Errorf("Grace = %v, want term_after's 1s", g)
	}
	a, err := c.Dial(zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Dial(zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if n := c.Running(); n != 2 {
		t.Errorf("Running = %d with two processes, want 2", n)
	}
	a.Close() // cat exits at its stdin's end
	<-exits
	if n := c.Running(); n != 1 {
		t.Errorf("Running = %d after one stopped, want 1", n)
	}
	b.Close()
	<-exits
	if n := c.Running(); n != 0 {
		t.Errorf("Running = %d after both stopped, want 0", n)
	}
	if g := (&upstream.Command{}).Grace(); g != upstream.DefaultGrace {
		t.Errorf("Grace = %v without term_after, want the default %v", g, upstream.DefaultGrace)
	}
	if _, err := (&upstream.Command{}).Dial(zap.NewNop()); err == nil {
		t.Error("Dial without a command line started something")
	}
	if _, err := (&upstream.Command{Argv: []string{"/nonexistent/server"}}).Dial(zap.NewNop()); err == nil {
		t.Error("Dial of a missing program succeeded")
	}
}

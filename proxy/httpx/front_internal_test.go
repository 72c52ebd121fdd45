package httpx

import (
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
)

// TestSweepRunsUntilCleanup: the sidecar's one sweep runs every quarter of
// the idle period on its clock, over every kind of session, and stops at
// Cleanup.
func TestSweepRunsUntilCleanup(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	s := &Sidecar{Children: &Children{Argv: []string{"true"}}, Legacy: &Legacy{}, SessionIdle: time.Hour, Clock: clk}
	if err := s.Provision(); err != nil {
		t.Fatal(err)
	}
	if clk.Pending() != 1 {
		t.Fatalf("%d timers after Provision, want the sweep's", clk.Pending())
	}
	relay{s}.adopt("x", newSession("", s, false), new(bool))
	clk.Advance(2 * time.Hour)
	if s.Sessions() != 0 {
		t.Error("the idle session was not swept")
	}
	s.Cleanup("done")
	if clk.Pending() != 0 {
		t.Errorf("%d timers after Cleanup, want none", clk.Pending())
	}
}

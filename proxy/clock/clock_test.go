package clock_test

import (
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
)

// TestFake: timers fire in order of their time, inside Advance, with Now
// at their time; a stopped timer never fires; one set by a firing timer
// fires in the same Advance when it falls due; Armed tells a timer was set.
func TestFake(t *testing.T) {
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	c := clock.NewFake(start)
	var got []time.Duration
	note := func() { got = append(got, c.Now().Sub(start)) }
	armed := c.Armed()
	c.AfterFunc(3*time.Second, note)
	select {
	case <-armed:
	default:
		t.Fatal("Armed not closed by AfterFunc")
	}
	c.AfterFunc(time.Second, func() { note(); c.AfterFunc(time.Second, note) })
	stopped := c.AfterFunc(2*time.Second, note)
	if !stopped.Stop() || stopped.Stop() {
		t.Error("Stop: want true, then false")
	}
	if n := c.Pending(); n != 2 {
		t.Errorf("Pending = %d, want 2", n)
	}
	c.Advance(1500 * time.Millisecond)
	if len(got) != 1 {
		t.Fatalf("after 1.5 s: fired at %v", got)
	}
	c.Advance(10 * time.Second)
	want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("fired at %v, want %v", got, want)
	}
	if now := c.Now().Sub(start); now != 11500*time.Millisecond {
		t.Errorf("Now = start+%v, want start+11.5s", now)
	}
	if n := c.Pending(); n != 0 {
		t.Errorf("Pending = %d after all fired", n)
	}
	if clock.Or(nil) != clock.Real || clock.Or(c) != c {
		t.Error("Or")
	}
}

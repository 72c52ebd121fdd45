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

// TestAtAPassedTime: a function set for a time the fake clock has passed
// (its Advance done) runs at once, as the real clock's would; with
// AfterFunc of the time left, read before an Advance the caller did not
// see, it waited for the next Advance, which a test that had advanced past
// it never made (the transcript client-timeout-restarts-for-a-join lost
// its cancel under -cpu 4). One set during an Advance, for a time it has
// reached, runs in that Advance, and the clock never goes back.
func TestAtAPassedTime(t *testing.T) {
	start := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	c := clock.NewFake(start)
	c.Advance(10 * time.Second)
	fired := make(chan struct{})
	clock.At(c, start.Add(5*time.Second), func() { close(fired) })
	select {
	case <-fired:
	case <-time.After(10 * time.Second): // bounds the test: it fails
		t.Fatal("a function set for a passed time never ran")
	}
	var inAdvance []time.Time
	clock.At(c, start.Add(11*time.Second), func() {
		inAdvance = append(inAdvance, c.Now())
		clock.At(c, start.Add(11*time.Second-time.Millisecond), func() { inAdvance = append(inAdvance, c.Now()) })
	})
	c.Advance(2 * time.Second)
	if len(inAdvance) != 2 || !inAdvance[1].Equal(start.Add(11*time.Second)) || !c.Now().Equal(start.Add(12*time.Second)) {
		t.Errorf("ran at %v, clock at %v; want twice at +11s, the clock at +12s", inAdvance, c.Now())
	}
}

// TestFakeSetFor: SetFor finds a timer by when it fires, among others, and
// not once it has fired or been stopped.
func TestFakeSetFor(t *testing.T) {
	c := clock.NewFake(time.Unix(0, 0))
	if c.SetFor(time.Minute) {
		t.Fatal("a timer found before any was set")
	}
	c.AfterFunc(time.Second, func() {})
	if c.SetFor(time.Minute) {
		t.Error("the one-second timer found as the minute's")
	}
	m := c.AfterFunc(time.Minute, func() {})
	if !c.SetFor(time.Minute) {
		t.Error("the minute's timer not found")
	}
	m.Stop()
	if c.SetFor(time.Minute) {
		t.Error("a stopped timer found")
	}
}

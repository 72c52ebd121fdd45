// Package clock is the time the proxy's timers run on: the real one, or,
// in tests, a fake that moves only when the test says so.
package clock

import (
	"slices"
	"sort"
	"sync"
	"time"
)

// Clock tells the time and calls functions later.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine after d.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop cancels the call, and reports whether it did.
	Stop() bool
}

// Real is the system's clock.
var Real Clock = real{}

type real struct{}

func (real) Now() time.Time { return time.Now() }

func (real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// At calls f in its own goroutine at t on c, at once if t has passed:
// AfterFunc of the time from now to t, but with the time read once, by the
// clock, so that a fake clock moved in between (Advance) neither skips it
// nor delays it past t.
func At(c Clock, t time.Time, f func()) Timer {
	if a, ok := c.(interface {
		afterFuncAt(time.Time, func()) Timer
	}); ok {
		return a.afterFuncAt(t, f)
	}
	return c.AfterFunc(t.Sub(c.Now()), f)
}

// Or returns c, or Real when c is nil.
func Or(c Clock) Clock {
	if c == nil {
		return Real
	}
	return c
}

// Fake is a Clock for tests: it moves only in Advance, which runs the
// functions that fall due, in order, on the caller's goroutine.
type Fake struct {
	mu        sync.Mutex
	now       time.Time
	timers    []*fakeTimer
	armed     chan struct{} // closed and replaced when a timer is set
	advancing bool          // an Advance runs: it fires what falls due, a timer set meanwhile too
}

type fakeTimer struct {
	c       *Fake
	at      time.Time
	f       func()
	stopped bool
}

// NewFake returns a fake clock set to start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, armed: make(chan struct{})}
}

// Now implements Clock.
func (c *Fake) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc implements Clock; f runs inside the Advance that reaches its
// time, not in a goroutine of its own.
func (c *Fake) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.setLocked(c.now.Add(d), f)
}

// afterFuncAt is At's: f runs at at, in the Advance that reaches it; a
// time already reached while no Advance runs fires at once, in a goroutine
// of its own, as the real clock's would.
func (c *Fake) afterFuncAt(at time.Time, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !at.After(c.now) && !c.advancing {
		go f()
		return &fakeTimer{c: c, at: at, stopped: true}
	}
	return c.setLocked(at, f)
}

// setLocked sets a timer for f at at.
func (c *Fake) setLocked(at time.Time, f func()) Timer {
	t := &fakeTimer{c: c, at: at, f: f}
	c.timers = append(c.timers, t)
	close(c.armed)
	c.armed = make(chan struct{})
	return t
}

// Stop implements Timer.
func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	return was
}

// SetFor reports whether a timer is set, and not yet fired or stopped, to
// fire d after now: a test waits for one timer among others (Armed says
// only that some timer was set).
func (c *Fake) SetFor(d time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at := c.now.Add(d)
	for _, t := range c.timers {
		if !t.stopped && t.at.Equal(at) {
			return true
		}
	}
	return false
}

// Pending returns how many timers are set and not yet fired or stopped.
func (c *Fake) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.stopped {
			n++
		}
	}
	return n
}

// Armed returns a channel closed when the next timer is set: a test waits
// on it, in place of sleeping, for the code under test to start a timer.
func (c *Fake) Armed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.armed
}

// Advance moves the clock by d, running every function that falls due.
func (c *Fake) Advance(d time.Duration) {
	c.mu.Lock()
	c.advancing = true
	end := c.now.Add(d)
	for {
		sort.SliceStable(c.timers, func(i, j int) bool { return c.timers[i].at.Before(c.timers[j].at) })
		var due *fakeTimer
		for _, t := range c.timers {
			if !t.stopped && !t.at.After(end) {
				due = t
				break
			}
		}
		if due == nil {
			break
		}
		due.stopped = true
		if due.at.After(c.now) { // a timer set meanwhile for a time already reached: never backwards
			c.now = due.at
		}
		c.mu.Unlock()
		due.f()
		c.mu.Lock()
	}
	c.timers = slices.DeleteFunc(c.timers, func(t *fakeTimer) bool { return t.stopped })
	c.now = end
	c.advancing = false
	c.mu.Unlock()
}

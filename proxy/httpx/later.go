package httpx

import (
	"sync"
	"sync/atomic"
	"time"
)

// later runs functions once a delay has passed since each was added, all
// on one timer of the runtime's, run a little late rather than once per
// function: a response stream that ends within the delay (most do) then
// costs no timer of its own. Each runtime timer set to go off before any
// other wakes an idle thread of the process to wait for it, which under a
// busy load costs the sidecar more than the stream's whole relay; watched
// streams and late headers (watchDelay) wait here instead.
type later struct {
	delay time.Duration
	mu    sync.Mutex
	queue []*laterFunc // in the order added, which is the order due
	timer *time.Timer
	armed bool
}

// laterFunc is a function waiting in a later.
type laterFunc struct {
	due     time.Time
	f       func()
	stopped atomic.Bool
}

// soon runs what waits watchDelay.
var soon = &later{delay: watchDelay}

// add runs f once the delay has passed, from a goroutine of the later's
// own (one after the other with the functions due then), up to half the
// delay late; unless stopped first.
func (l *later) add(f func()) *laterFunc {
	lf := &laterFunc{due: time.Now().Add(l.delay), f: f}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.queue = append(l.queue, lf)
	if !l.armed {
		l.armed = true
		if l.timer == nil {
			l.timer = time.AfterFunc(l.delay, l.fire)
		} else {
			l.timer.Reset(l.delay)
		}
	}
	return lf
}

// stop keeps the function from running, unless it has begun.
func (lf *laterFunc) stop() { lf.stopped.Store(true) }

// fire runs the functions due, and sets the timer for the next ones.
func (l *later) fire() {
	now := time.Now()
	l.mu.Lock()
	n := 0
	for n < len(l.queue) && !l.queue[n].due.After(now) {
		n++
	}
	due := make([]*laterFunc, n)
	copy(due, l.queue)
	rest := copy(l.queue, l.queue[n:])
	clear(l.queue[rest:])
	l.queue = l.queue[:rest]
	if len(l.queue) > 0 {
		l.timer.Reset(max(l.queue[0].due.Sub(now), l.delay/2))
	} else {
		l.armed = false
	}
	l.mu.Unlock()
	for _, lf := range due {
		if !lf.stopped.Load() {
			lf.f()
		}
	}
}

package closewatch

import (
	"sync"
	"sync/atomic"
	"time"
)

// Queue runs functions once a delay has passed since each was added, all
// on one timer of the runtime's, run a little late rather than once per
// function: a response stream that ends within the delay (most do) then
// costs no timer of its own. Each runtime timer set to go off before any
// other wakes an idle thread of the process to wait for it, which under a
// busy load costs the sidecar more than the stream's whole relay; a
// stream's late headers wait here instead. Even one timer costs: under a
// steady load it goes off every delay or so, which is why the close watch
// (Watch) begins at once, for two system calls, rather than here.
//
// A sidecar owns its Queue: Stop, in Cleanup, drops what still waits and
// waits for what runs. Its delay is a cost saving, not a protocol's time,
// so it runs on the real clock. With Delay 0 functions run at once, on
// the timer's goroutine; set Delay before the first Add.
type Queue struct {
	Delay   time.Duration // how long after Add a function runs
	running sync.Mutex    // held while fire runs the functions due
	mu      sync.Mutex    // guards the fields below
	queue   []*Pending    // in the order added, which is the order due
	timer   *time.Timer
	armed   bool
	stopped bool
}

// Pending is a function waiting in a Queue.
type Pending struct {
	due     time.Time
	f       func()
	stopped atomic.Bool
}

// Add runs f once the delay has passed, from a goroutine of the Queue's
// own (one after the other with the functions due then), up to half the
// delay late; unless stopped first.
func (l *Queue) Add(f func()) *Pending {
	lf := &Pending{due: time.Now().Add(l.Delay), f: f}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return lf // never runs
	}
	l.queue = append(l.queue, lf)
	if !l.armed {
		l.armed = true
		if l.timer == nil {
			l.timer = time.AfterFunc(l.Delay, l.fire)
		} else {
			l.timer.Reset(l.Delay)
		}
	}
	return lf
}

// Waiting returns how many functions wait, stopped ones included until
// their time comes: while any wait, the Queue's timer goes off.
func (l *Queue) Waiting() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue)
}

// Stop keeps the function from running, unless it has begun.
func (lf *Pending) Stop() { lf.stopped.Store(true) }

// Stop drops the functions still waiting and waits for those running; Add
// runs nothing after it.
func (l *Queue) Stop() {
	l.mu.Lock()
	l.stopped = true
	clear(l.queue)
	l.queue = nil
	if l.timer != nil {
		l.timer.Stop()
	}
	l.mu.Unlock()
	l.running.Lock() // a fire under way ends
	l.running.Unlock()
}

// fire runs the functions due, and sets the timer for the next ones.
func (l *Queue) fire() {
	l.running.Lock()
	defer l.running.Unlock()
	now := time.Now()
	l.mu.Lock()
	n := 0
	for n < len(l.queue) && !l.queue[n].due.After(now) {
		n++
	}
	due := make([]*Pending, n)
	copy(due, l.queue)
	rest := copy(l.queue, l.queue[n:])
	clear(l.queue[rest:])
	l.queue = l.queue[:rest]
	if len(l.queue) > 0 && !l.stopped {
		l.timer.Reset(max(l.queue[0].due.Sub(now), l.Delay/2))
	} else {
		l.armed = false
	}
	stopped := l.stopped
	l.mu.Unlock()
	if stopped {
		return
	}
	for _, lf := range due {
		if !lf.stopped.Load() {
			lf.f()
		}
	}
}

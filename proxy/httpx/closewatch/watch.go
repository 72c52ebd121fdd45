package closewatch

import (
	"errors"
	"net"
	"sync"
	"syscall"
)

// Watch calls onClose, from a goroutine of the watcher's, if the peer of
// conn closes the connection (or resets it) before stop is called; stop
// waits for an onClose already running. It never reads from conn: one
// kernel watcher per sidecar (epoll on Linux, kqueue on macOS and the BSDs),
// shared by every watched connection and waited on by one goroutine,
// reports the peer's hang-up, so a watched stream costs a map entry and
// two system calls (its registration and its end), not a goroutine or a
// timer; a hang-up before the watch began is reported too. Elsewhere
// (Windows), and once the watcher has stopped, nothing is watched, and a
// closed stream is seen at the next write to it.
//
// fasthttp does not notice a client that goes away while a response
// streams until a write fails; with nothing to write (a tool still
// working), that could be never. In protocol 2026-07-28 that close is the
// cancel, so it must be seen at once.
func (wr *Watcher) Watch(conn net.Conn, onClose func()) (stop func()) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return func() {}
	}
	raw, err := sc.SyscallConn()
	if err != nil || wr.start() != nil {
		return func() {}
	}
	w := &watch{onClose: onClose}
	key, ok := wr.add(w)
	if !ok {
		return func() {}
	}
	var added bool
	raw.Control(func(fd uintptr) { added = wr.registerIfRunning(fd, key) })
	if !added {
		wr.remove(key)
		return func() {}
	}
	return func() {
		w.stop()
		wr.remove(key)
		// Control runs only while conn is open, so fd is still conn's own.
		raw.Control(func(fd uintptr) { wr.unregisterIfRunning(fd, key) })
	}
}

// watch is one watched connection.
type watch struct {
	mu      sync.Mutex // held while onClose runs
	done    bool       // fired or stopped
	onClose func()
}

// fire calls onClose unless the watch was stopped.
func (w *watch) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.done = true
		w.onClose()
	}
}

// stop disarms the watch, waiting for an onClose that is running.
func (w *watch) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}

// Watcher is a sidecar's one kernel watcher for Watch: the platform's
// instance (epoll, kqueue), the goroutine that waits on it, and the watches
// by key. It starts with the first watch, and stop ends it: the goroutine,
// every onClose it started, the instance. The zero Watcher is ready.
type Watcher struct {
	once    sync.Once
	kfd     int    // the epoll or kqueue instance
	wake    [2]int // a pipe whose read end, watched too, ends the loop
	err     error
	looped  chan struct{} // closed when the loop has returned
	fires   sync.WaitGroup
	mu      sync.Mutex // guards the fields below
	stopped bool
	next    uint64
	watches map[uint64]*watch
	fdKeys  map[uintptr]uint64 // kqueue's: events carry the descriptor, not the key
}

// Begun returns how many watches have begun (each a registration with
// the kernel and, at its stop, its end).
func (wr *Watcher) Begun() uint64 {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	return wr.next
}

// start creates the kernel watcher and its goroutine, once; never after
// stop.
func (wr *Watcher) start() error {
	wr.once.Do(func() {
		wr.mu.Lock()
		defer wr.mu.Unlock()
		if wr.stopped {
			wr.err = errWatcherStopped
			return
		}
		wr.kfd, wr.wake, wr.err = newKernelWatcher()
		if wr.err == nil {
			wr.watches = make(map[uint64]*watch)
			wr.looped = make(chan struct{})
			go func() {
				defer close(wr.looped)
				wr.loop()
			}()
		}
	})
	return wr.err
}

var errWatcherStopped = errors.New("the close watcher has stopped")

// Stop ends the watcher: no watch begins after it, the loop returns, and
// stop waits for it and for every onClose it started before it closes the
// kernel's instance.
func (wr *Watcher) Stop() {
	wr.once.Do(func() {}) // never started: now it never will
	wr.mu.Lock()
	was := wr.stopped
	wr.stopped = true
	wr.mu.Unlock()
	if was || wr.looped == nil {
		return
	}
	wakeKernelWatcher(wr.wake)
	<-wr.looped
	wr.fires.Wait()
	closeKernelWatcher(wr.kfd, wr.wake)
}

// fire runs w's onClose on a goroutine that stop waits for.
func (wr *Watcher) fire(w *watch) {
	wr.fires.Add(1) // on the loop, which stop waits for first
	go func() {
		defer wr.fires.Done()
		w.fire()
	}()
}

// registerIfRunning registers fd under key, unless the watcher has stopped.
func (wr *Watcher) registerIfRunning(fd uintptr, key uint64) bool {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	return !wr.stopped && wr.register(fd, key)
}

// unregisterIfRunning unregisters fd, unless the watcher has stopped (its
// instance is closed, and its number may be another file's).
func (wr *Watcher) unregisterIfRunning(fd uintptr, key uint64) {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	if !wr.stopped {
		wr.unregister(fd, key)
	}
}

// add registers w and returns its key, unless the watcher has stopped.
// Keys are never reused, so an event can never reach a later watch; 0 is
// the wake pipe's.
func (wr *Watcher) add(w *watch) (uint64, bool) {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	if wr.stopped {
		return 0, false
	}
	wr.next++
	wr.watches[wr.next] = w
	return wr.next, true
}

// remove forgets the watch of key and returns it, nil if already gone.
func (wr *Watcher) remove(key uint64) *watch {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	w := wr.watches[key]
	delete(wr.watches, key)
	return w
}

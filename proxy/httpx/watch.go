package httpx

import (
	"net"
	"sync"
	"syscall"
	"time"
)

// watchClose calls onClose, from a goroutine of its own, if the peer of
// conn closes the connection (or resets it) before stop is called; stop
// waits for an onClose already running. It never reads from conn: one
// kernel watcher per process (epoll on Linux, kqueue on macOS and the BSDs),
// shared by every watched connection and waited on by one goroutine,
// reports the peer's hang-up, so a watched stream costs a map entry, not a
// goroutine. Elsewhere (Windows) nothing is watched, and a closed stream is
// seen at the next write to it.
//
// fasthttp does not notice a client that goes away while a response
// streams until a write fails; with nothing to write (a tool still
// working), that could be never. In protocol 2026-07-28 that close is the
// cancel, so it must be seen at once.
func watchClose(conn net.Conn, onClose func()) (stop func()) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return func() {}
	}
	raw, err := sc.SyscallConn()
	if err != nil || closeWatcher.start() != nil {
		return func() {}
	}
	w := &watch{onClose: onClose}
	key := closeWatcher.add(w)
	var added bool
	raw.Control(func(fd uintptr) { added = closeWatcher.register(fd, key) })
	if !added {
		closeWatcher.remove(key)
		return func() {}
	}
	return func() {
		w.stop()
		closeWatcher.remove(key)
		// Control runs only while conn is open, so fd is still conn's own.
		raw.Control(func(fd uintptr) { closeWatcher.unregister(fd, key) })
	}
}

// watchDelay is how long a response stream runs before its connection is
// watched (watchCloseAfter, with soon): most calls are answered sooner,
// and a stream that never registers costs no system call. A close meanwhile is seen
// when the watch begins, the kernel reporting a hang-up that came before.
const watchDelay = 10 * time.Millisecond

// watchCloseAfter is watchClose, begun once l's delay has passed, unless
// stop has been called by then.
func watchCloseAfter(conn net.Conn, l *later, onClose func()) (stop func()) {
	var (
		mu      sync.Mutex // guards stopped and unwatch
		stopped bool
		unwatch func()
	)
	lf := l.add(func() {
		mu.Lock()
		defer mu.Unlock()
		if !stopped { // stop not yet called: conn is still this stream's
			unwatch = watchClose(conn, onClose)
		}
	})
	return func() {
		lf.stop()
		mu.Lock()
		stopped = true
		u := unwatch
		mu.Unlock()
		if u != nil {
			u()
		}
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

// closeWatcher is the process's one kernel watcher for watchClose.
var closeWatcher watcher

// watcher holds the watches by key, for the platform's kernel watcher.
type watcher struct {
	once    sync.Once
	kfd     int // the epoll or kqueue instance
	err     error
	mu      sync.Mutex // guards the fields below
	next    uint64
	watches map[uint64]*watch
}

// start creates the kernel watcher and its goroutine, once.
func (wr *watcher) start() error {
	wr.once.Do(func() {
		wr.kfd, wr.err = newKernelWatcher()
		if wr.err == nil {
			wr.watches = make(map[uint64]*watch)
			go wr.loop()
		}
	})
	return wr.err
}

// add registers w and returns its key. Keys are never reused, so an event
// can never reach a later watch.
func (wr *watcher) add(w *watch) uint64 {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	wr.next++
	wr.watches[wr.next] = w
	return wr.next
}

// remove forgets the watch of key and returns it, nil if already gone.
func (wr *watcher) remove(key uint64) *watch {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	w := wr.watches[key]
	delete(wr.watches, key)
	return w
}

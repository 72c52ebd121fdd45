package httpx

import (
	"net"
	"sync"
	"syscall"
)

// watchClose calls onClose, from a goroutine of its own, if the peer of
// conn closes the connection (or resets it) before stop is called; stop
// waits for an onClose already running. It never reads from conn: one
// epoll instance, shared by every watched connection and waited on by one
// goroutine, reports the peer's hang-up (EPOLLRDHUP), so a watched stream
// costs a map entry, not a goroutine.
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
	raw.Control(func(fd uintptr) {
		ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: int32(key), Pad: int32(key >> 32)}
		added = syscall.EpollCtl(closeWatcher.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev) == nil
	})
	if !added {
		closeWatcher.remove(key)
		return func() {}
	}
	return func() {
		w.stop()
		closeWatcher.remove(key)
		// Control runs only while conn is open, so fd is still conn's own.
		raw.Control(func(fd uintptr) {
			syscall.EpollCtl(closeWatcher.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil)
		})
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

// closeWatcher is the process's one epoll instance for watchClose.
var closeWatcher watcher

type watcher struct {
	once    sync.Once
	epfd    int
	err     error
	mu      sync.Mutex // guards the fields below
	next    uint64
	watches map[uint64]*watch
}

// start creates the epoll instance and its goroutine, once.
func (wr *watcher) start() error {
	wr.once.Do(func() {
		wr.epfd, wr.err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if wr.err == nil {
			wr.watches = make(map[uint64]*watch)
			go wr.loop()
		}
	})
	return wr.err
}

// add registers w and returns its key, the epoll event's data. Keys are
// never reused, so an event can never reach a later watch.
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

// loop waits for hang-ups and fires their watches. It blocks in
// epoll_wait, which holds one OS thread for the process.
func (wr *watcher) loop() {
	events := make([]syscall.EpollEvent, 128)
	for {
		n, err := syscall.EpollWait(wr.epfd, events, -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return // only EBADF or EINVAL, which a live instance never gives
		}
		for _, ev := range events[:n] {
			if w := wr.remove(uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32); w != nil {
				go w.fire()
			}
		}
	}
}

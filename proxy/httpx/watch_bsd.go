//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package httpx

import (
	"sync"

	"golang.org/x/sys/unix"
)

func newKernelWatcher() (int, error) { return unix.Kqueue() }

// fdKeys maps each watched descriptor to its watch's key: kqueue's user
// data differs in type across the BSDs, so events carry the descriptor.
var fdKeys sync.Map // uintptr -> uint64

// register asks kqueue for fd's readable-or-EOF events (edge-triggered: one
// per change, so that data a live peer sends does not spin the loop).
func (wr *watcher) register(fd uintptr, key uint64) bool {
	fdKeys.Store(fd, key)
	var ev unix.Kevent_t
	unix.SetKevent(&ev, int(fd), unix.EVFILT_READ, unix.EV_ADD|unix.EV_CLEAR)
	if _, err := unix.Kevent(wr.kfd, []unix.Kevent_t{ev}, nil, nil); err != nil {
		fdKeys.Delete(fd)
		return false
	}
	return true
}

func (wr *watcher) unregister(fd uintptr, key uint64) {
	var ev unix.Kevent_t
	unix.SetKevent(&ev, int(fd), unix.EVFILT_READ, unix.EV_DELETE)
	unix.Kevent(wr.kfd, []unix.Kevent_t{ev}, nil, nil)
	fdKeys.CompareAndDelete(fd, key)
}

// loop waits for end-of-file events and fires their watches. An event is
// trusted only if the descriptor still reads as closed (a peek): its
// number may have gone to a new connection meanwhile.
func (wr *watcher) loop() {
	events := make([]unix.Kevent_t, 128)
	for {
		n, err := unix.Kevent(wr.kfd, nil, events, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return
		}
		for _, ev := range events[:n] {
			if ev.Flags&unix.EV_EOF == 0 || !peerClosed(int(ev.Ident)) {
				continue
			}
			if key, ok := fdKeys.Load(uintptr(ev.Ident)); ok {
				if w := wr.remove(key.(uint64)); w != nil {
					go w.fire()
				}
			}
		}
	}
}

// peerClosed reports whether fd's peer has closed: a peek that reads
// nothing and no error means end of file.
func peerClosed(fd int) bool {
	var b [1]byte
	n, _, err := unix.Recvfrom(fd, b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	return n == 0 && err == nil
}

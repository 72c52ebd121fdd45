//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package closewatch

import "golang.org/x/sys/unix"

// newKernelWatcher makes the kqueue instance, and the pipe that wakes its
// loop to end it.
func newKernelWatcher() (kfd int, wake [2]int, err error) {
	if kfd, err = unix.Kqueue(); err != nil {
		return 0, wake, err
	}
	if err = unix.Pipe(wake[:]); err != nil {
		unix.Close(kfd)
		return 0, wake, err
	}
	unix.CloseOnExec(wake[0])
	unix.CloseOnExec(wake[1])
	var ev unix.Kevent_t
	unix.SetKevent(&ev, wake[0], unix.EVFILT_READ, unix.EV_ADD)
	if _, err = unix.Kevent(kfd, []unix.Kevent_t{ev}, nil, nil); err != nil {
		closeKernelWatcher(kfd, wake)
		return 0, wake, err
	}
	return kfd, wake, nil
}

// closeKernelWatcher closes the instance and the wake pipe.
func closeKernelWatcher(kfd int, wake [2]int) {
	unix.Close(kfd)
	unix.Close(wake[0])
	unix.Close(wake[1])
}

// wakeKernelWatcher ends the loop.
func wakeKernelWatcher(wake [2]int) { unix.Write(wake[1], []byte{0}) }

// register asks kqueue for fd's readable-or-EOF events (edge-triggered: one
// per change, so that data a live peer sends does not spin the loop). The
// events carry the descriptor (kqueue's user data differs in type across
// the BSDs): fdKeys maps it to the watch's key. wr.mu is held.
func (wr *Watcher) register(fd uintptr, key uint64) bool {
	var ev unix.Kevent_t
	unix.SetKevent(&ev, int(fd), unix.EVFILT_READ, unix.EV_ADD|unix.EV_CLEAR)
	if _, err := unix.Kevent(wr.kfd, []unix.Kevent_t{ev}, nil, nil); err != nil {
		return false
	}
	if wr.fdKeys == nil {
		wr.fdKeys = make(map[uintptr]uint64)
	}
	wr.fdKeys[fd] = key
	return true
}

// unregister forgets fd; wr.mu is held.
func (wr *Watcher) unregister(fd uintptr, key uint64) {
	var ev unix.Kevent_t
	unix.SetKevent(&ev, int(fd), unix.EVFILT_READ, unix.EV_DELETE)
	unix.Kevent(wr.kfd, []unix.Kevent_t{ev}, nil, nil)
	if wr.fdKeys[fd] == key {
		delete(wr.fdKeys, fd)
	}
}

// keyOf returns the key of the watch on fd.
func (wr *Watcher) keyOf(fd uintptr) (uint64, bool) {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	key, ok := wr.fdKeys[fd]
	return key, ok
}

// loop waits for end-of-file events and fires their watches, until the
// wake pipe is written. An event is trusted only if the descriptor still
// reads as closed (a peek): its number may have gone to a new connection
// meanwhile.
func (wr *Watcher) loop() {
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
			if int(ev.Ident) == wr.wake[0] {
				return // stop
			}
			if ev.Flags&unix.EV_EOF == 0 || !peerClosed(int(ev.Ident)) {
				continue
			}
			if key, ok := wr.keyOf(uintptr(ev.Ident)); ok {
				if w := wr.remove(key); w != nil {
					wr.fire(w)
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

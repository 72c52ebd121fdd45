package closewatch

import "syscall"

// newKernelWatcher makes the epoll instance, and the pipe that wakes its
// loop to end it, registered under key 0.
func newKernelWatcher() (kfd int, wake [2]int, err error) {
	if kfd, err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC); err != nil {
		return 0, wake, err
	}
	if err = syscall.Pipe2(wake[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		syscall.Close(kfd)
		return 0, wake, err
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN}
	if err = syscall.EpollCtl(kfd, syscall.EPOLL_CTL_ADD, wake[0], &ev); err != nil {
		closeKernelWatcher(kfd, wake)
		return 0, wake, err
	}
	return kfd, wake, nil
}

// closeKernelWatcher closes the instance and the wake pipe.
func closeKernelWatcher(kfd int, wake [2]int) {
	syscall.Close(kfd)
	syscall.Close(wake[0])
	syscall.Close(wake[1])
}

// wakeKernelWatcher ends the loop.
func wakeKernelWatcher(wake [2]int) { syscall.Write(wake[1], []byte{0}) }

// register asks epoll for fd's hang-up (EPOLLRDHUP), once, with key as the
// event's data; wr.mu is held.
func (wr *Watcher) register(fd uintptr, key uint64) bool {
	ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: int32(key), Pad: int32(key >> 32)}
	return syscall.EpollCtl(wr.kfd, syscall.EPOLL_CTL_ADD, int(fd), &ev) == nil
}

// unregister forgets fd; wr.mu is held.
func (wr *Watcher) unregister(fd uintptr, _ uint64) {
	syscall.EpollCtl(wr.kfd, syscall.EPOLL_CTL_DEL, int(fd), nil)
}

// loop waits for hang-ups and fires their watches, until the wake pipe is
// written. It blocks in epoll_wait, which holds one OS thread while the
// watcher runs.
func (wr *Watcher) loop() {
	events := make([]syscall.EpollEvent, 128)
	for {
		n, err := syscall.EpollWait(wr.kfd, events, -1)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return // only EBADF or EINVAL, which a live instance never gives
		}
		for _, ev := range events[:n] {
			key := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if key == 0 {
				return // stop
			}
			if w := wr.remove(key); w != nil {
				wr.fire(w)
			}
		}
	}
}

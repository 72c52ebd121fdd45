package httpx

import "syscall"

func newKernelWatcher() (int, error) { return syscall.EpollCreate1(syscall.EPOLL_CLOEXEC) }

// register asks epoll for fd's hang-up (EPOLLRDHUP), once, with key as the
// event's data.
func (wr *watcher) register(fd uintptr, key uint64) bool {
	ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: int32(key), Pad: int32(key >> 32)}
	return syscall.EpollCtl(wr.kfd, syscall.EPOLL_CTL_ADD, int(fd), &ev) == nil
}

func (wr *watcher) unregister(fd uintptr, _ uint64) {
	syscall.EpollCtl(wr.kfd, syscall.EPOLL_CTL_DEL, int(fd), nil)
}

// loop waits for hang-ups and fires their watches. It blocks in
// epoll_wait, which holds one OS thread for the process.
func (wr *watcher) loop() {
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
			if w := wr.remove(uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32); w != nil {
				go w.fire()
			}
		}
	}
}

//go:build unix

package main

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// hangup returns a channel closed when the client closes its end of the
// proxy's stdin, seen by the kernel whether or not the relay is reading:
// a relay held back by a server that does not read its own stdin cannot
// see the end of its input, yet the server must still be stopped. It is
// nil when stdin is not a pipe or socket the kernel can watch.
func hangup(stdin io.Reader) <-chan struct{} {
	f, ok := stdin.(*os.File)
	if !ok {
		return nil
	}
	raw, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	fd := -1
	raw.Control(func(u uintptr) { fd = int(u) })
	if fd < 0 {
		return nil
	}
	done := make(chan struct{})
	go func() { // one thread parked in poll for the process's life
		fds := []unix.PollFd{{Fd: int32(fd), Events: pollHangUp}} // POLLHUP comes unasked
		for {
			_, err := unix.Poll(fds, -1)
			if err == unix.EINTR {
				continue
			}
			if err != nil || fds[0].Revents&(unix.POLLHUP|pollHangUp|unix.POLLERR|unix.POLLNVAL) != 0 {
				close(done)
				return
			}
		}
	}()
	return done
}

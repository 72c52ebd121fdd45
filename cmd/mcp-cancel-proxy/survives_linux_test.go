package main

import (
	"time"

	"golang.org/x/sys/unix"
)

// survives reports whether pid, sent SIGKILL (its process group was), is
// still alive 5 s on: the kernel tears a killed process down on its own
// time, and the proxy, which reaps only its own child, cannot wait for a
// grandchild's end. It waits on a pidfd, which becomes readable when the
// process exits, not on a sleep.
func survives(pid int) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return alive(pid) // gone (ESRCH), or no pidfd: as it is now
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int((5 * time.Second).Milliseconds()))
		if err == unix.EINTR {
			continue
		}
		return n == 0 && alive(pid)
	}
}

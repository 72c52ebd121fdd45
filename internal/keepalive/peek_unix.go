//go:build unix

package keepalive

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// peerClosed reports whether the server has closed c, or sent on it
// unasked (either makes it unfit for a request): a peek that does not
// wait finds the end of the stream, a reset or bytes. A connection that
// is no socket (a proxy's tunnel) is taken as open.
func peerClosed(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	var buf [1]byte
	err = raw.Read(func(fd uintptr) bool {
		_, _, err := unix.Recvfrom(int(fd), buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EWOULDBLOCK), errors.Is(err, unix.EINTR):
		case err != nil: // a reset, or worse
			closed = true
		default: // n == 0: the end of the stream; n > 0: bytes nobody asked for
			closed = true
		}
		return true // never wait
	})
	return closed || err != nil
}

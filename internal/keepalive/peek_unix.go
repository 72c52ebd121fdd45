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
// is no socket (a proxy's tunnel) is taken as open. The peek takes no
// lock of the connection's: a Read blocked on it (a TLS connection's, whose
// Close writes its close_notify while a stream is being read) must not
// hold it up.
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
	err = raw.Control(func(fd uintptr) {
		_, _, err := unix.Recvfrom(int(fd), buf[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EWOULDBLOCK), errors.Is(err, unix.EINTR):
		case err != nil: // a reset, or worse
			closed = true
		default: // n == 0: the end of the stream; n > 0: bytes nobody asked for
			closed = true
		}
	})
	return closed || err != nil
}

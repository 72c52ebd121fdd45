package httpx

import (
	"net"
	"syscall"
	"time"
)

// watchClose calls onClose, from its own goroutine, if the peer of conn
// closes the connection (or resets it) before stop is called. It never
// consumes a byte: it peeks, and waits for readability in the runtime's
// poller, so it costs no thread while it waits. It must only run while
// nothing else reads conn, as while a response streams out.
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
	if err != nil {
		return func() {}
	}
	// The server's read deadline for the request may still be set; the
	// watch lasts as long as the response.
	conn.SetReadDeadline(time.Time{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		closed := false
		raw.Read(func(fd uintptr) bool {
			var b [1]byte
			n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if err == syscall.EAGAIN || err == syscall.EINTR {
				return false // nothing yet: wait for the poller
			}
			closed = err != nil || n == 0 // an error, or EOF; data means the peer is alive
			return true
		})
		if closed {
			onClose()
		}
	}()
	return func() {
		conn.SetReadDeadline(time.Now()) // wakes the watcher
		<-done
		conn.SetReadDeadline(time.Time{})
	}
}

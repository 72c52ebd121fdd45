//go:build !unix

package keepalive

import "net"

// peerClosed cannot look without waiting here (Windows has no peek that
// does not block through Go's poller): the connection is taken as open,
// and only the retirement of idle connections and the server's
// Keep-Alive timeout keep stale ones out of use.
func peerClosed(net.Conn) bool { return false }

package upstream

import "github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"

// Backend is one session's server as a child session talks to it: its
// lines in and out, a way to end it, and a channel closed once it has.
type Backend interface {
	// Conn returns the server's lines (In) and the way to send it lines
	// (Out).
	Conn() stdio.Conn
	// Stop ends the server: the stop ladder for a process, closing the
	// connection for an upstream. It does not wait, and may be called again.
	Stop()
	// Exited is closed once the server has ended.
	Exited() <-chan struct{}
}

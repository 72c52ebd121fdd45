package upstream

import (
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/child"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
)

// Backend is one session's server as a child session talks to it: its
// lines in and out, a way to end it, and a channel closed once it has.
type Backend interface {
	// Conn returns the server's lines (In) and the way to send it lines
	// (Out).
	Conn() stdio.Conn
	// Stop ends the server: the stop ladder for a process, closing the
	// connection for an upstream. A process's waits for its exit (bounded
	// by the ladder); it may be called again.
	Stop()
	// Exited is closed once the server has ended.
	Exited() <-chan struct{}
}

// StartChild starts a stdio server, argv, as a Backend: its stdout is the
// server's lines, its stdin takes the session's, and Stop is its stop
// ladder (package child).
func StartChild(argv []string, o child.Options) (Backend, error) {
	p, err := child.Start(argv, o)
	if err != nil {
		return nil, err
	}
	return process{p}, nil
}

// process is a stdio server process as a Backend.
type process struct{ *child.Process }

func (p process) Conn() stdio.Conn { return stdio.Conn{In: p.Stdout, Out: p.Stdin} }

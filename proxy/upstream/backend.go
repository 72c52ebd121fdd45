package upstream

import (
	"cmp"
	"errors"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

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

// Dialer reaches the server of one session of lines: it starts a stdio
// server (Command), or opens a session of an HTTP server
// (SSEUpstream, StreamableUpstream). An HTTP front is given one, chosen
// once from the configuration, and never asks which kind it is.
type Dialer interface {
	// Dial returns a new session's server, logging to log.
	Dial(log *zap.Logger) (Backend, error)
}

// DialFunc is a function as a Dialer (a test's servers).
type DialFunc func(log *zap.Logger) (Backend, error)

// Dial implements Dialer.
func (f DialFunc) Dial(log *zap.Logger) (Backend, error) { return f(log) }

// DefaultGrace is how long a session's end waits for its server to take
// what it was sent before it stops it, where its Dialer says nothing else
// (Graced).
const DefaultGrace = child.DefaultTermAfter

// Graced is a Dialer whose servers take their own time to stop: a
// session's end allows them Grace (a stdio server's term_after).
type Graced interface {
	Grace() time.Duration
}

// Command is a Dialer that starts a stdio server for each session: Argv,
// its stop ladder and stderr as Options say (Options.Logger is the
// session's). Running counts the processes started and not yet ended.
type Command struct {
	Argv    []string
	Options child.Options

	running atomic.Int64
}

// Dial implements Dialer: it starts the command.
func (c *Command) Dial(log *zap.Logger) (Backend, error) {
	if len(c.Argv) == 0 {
		return nil, errNoCommand
	}
	o := c.Options
	o.Logger = log
	c.running.Add(1) // counted while the process runs
	onExit := o.OnExit
	o.OnExit = func() {
		c.running.Add(-1)
		if onExit != nil {
			onExit()
		}
	}
	back, err := StartChild(c.Argv, o)
	if err != nil {
		c.running.Add(-1)
		return nil, err
	}
	return back, nil
}

var errNoCommand = errors.New("no server command")

// Running returns how many of the processes Dial started have not ended.
func (c *Command) Running() int { return int(c.running.Load()) }

// Grace implements Graced: the server's term_after.
func (c *Command) Grace() time.Duration { return cmp.Or(c.Options.TermAfter, DefaultGrace) }

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

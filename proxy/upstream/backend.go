package upstream

import (
	"cmp"
	"errors"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/child"
)

// Dialer reaches the server of one session: it starts a stdio server
// (Command), or opens a session of an HTTP server (SSEUpstream,
// StreamableUpstream), and returns it as a Conn, whatever its kind. An
// HTTP front is given one, chosen once from the configuration, and never
// asks which kind it is.
type Dialer interface {
	// Dial returns a new session's server, logging to log.
	Dial(log *zap.Logger) (Conn, error)
}

// DialFunc is a function as a Dialer (a test's servers).
type DialFunc func(log *zap.Logger) (Conn, error)

// Dial implements Dialer.
func (f DialFunc) Dial(log *zap.Logger) (Conn, error) { return f(log) }

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
	// MaxFrameSize is the longest line read from the server
	// (framing.DefaultMaxFrameSize if zero).
	MaxFrameSize int

	running atomic.Int64
}

// Dial implements Dialer: it starts the command, whose lines are the
// Conn's (PipeConn).
func (c *Command) Dial(log *zap.Logger) (Conn, error) {
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
	conn, err := startPipe(c.Argv, o, c.MaxFrameSize)
	if err != nil {
		c.running.Add(-1)
		return nil, err
	}
	return conn, nil
}

var errNoCommand = errors.New("no server command")

// Running returns how many of the processes Dial started have not ended.
func (c *Command) Running() int { return int(c.running.Load()) }

// Grace implements Graced: the server's term_after.
func (c *Command) Grace() time.Duration { return cmp.Or(c.Options.TermAfter, DefaultGrace) }

// startPipe starts a stdio server, argv, as a PipeConn over its stdout and
// stdin, whose Close runs its stop ladder.
func startPipe(argv []string, o child.Options, maxFrame int) (*PipeConn, error) {
	p, err := child.Start(argv, o)
	if err != nil {
		return nil, err
	}
	return NewPipeConn(p.Stdout, p.Stdin, PipeOptions{MaxFrameSize: maxFrame, Stop: p.Stop, DrainWait: o.TermAfter, Logger: o.Logger}), nil
}

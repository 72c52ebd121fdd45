package upstream

import (
	"cmp"
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/wire"
)

// PipeConn is a server that speaks lines over a pair of byte streams (a
// stdio server's stdout and stdin) as a Conn. What it is sent is queued
// toward the server's input in a wire.Outbox (with writev where the input
// is a pipe: written in the caller's goroutine as far as the pipe takes
// it, the rest by the outbox's writer), so Send and Cancel never wait for
// a server that does not read; a stdio session queues its frames in that
// Outbox itself (Outbox), with the tickets that withdraw them, as the
// wrapper always has. Everything the server says comes on the one Listen
// stream, read by its caller: a request's answer too, so Send returns no
// Stream.
type PipeConn struct {
	in  io.Reader
	out *wire.Outbox
	o   PipeOptions

	mu        sync.Mutex
	queued    map[*proxy.Call]wire.Ticket // the requests sent, until their cancel, pruned once written
	pruneAt   int                         // queued's size at which the written are let go
	listening bool
	closeOnce sync.Once
}

// PipeOptions configure a PipeConn.
type PipeOptions struct {
	// MaxFrameSize is the longest line read from the server
	// (framing.DefaultMaxFrameSize if zero).
	MaxFrameSize int
	// Stop, if set, ends the server once its input is closed (a process's
	// stop ladder) and returns once it has; Close calls it.
	Stop func()
	// DrainWait bounds how long Close waits for what is queued to be
	// written (a server that does not read holds it) before it calls
	// Stop (DefaultGrace if zero).
	DrainWait time.Duration
	// Logger, if set, gets what the connection has to say.
	Logger *zap.Logger
}

// NewPipeConn returns the server that reads out and writes in as a Conn.
func NewPipeConn(in io.Reader, out io.WriteCloser, o PipeOptions) *PipeConn {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	return &PipeConn{in: in, out: wire.NewOutbox(out), o: o, queued: map[*proxy.Call]wire.Ticket{}}
}

// Outbox returns the queue toward the server's input, for a session that
// queues its frames there itself, each with its ticket (a stdio session):
// it then writes a burst of them at once (Flush) and withdraws a request
// its cancel finds still queued, with no copy and no second queue. Such a
// session does not call Send or Cancel, which keep tickets of their own.
func (c *PipeConn) Outbox() *wire.Outbox { return c.out }

// Send implements Conn: frame is queued for the server as a line and
// written as far as the server takes it now. Its answer comes on Listen.
func (c *PipeConn) Send(_ context.Context, frame []byte, calls []*proxy.Call, _ Along) (Stream, error) {
	b := wire.GetBufFor(len(frame) + 1)
	b.B = append(b.B, frame...)
	t := c.out.SendNow(b)
	if t == (wire.Ticket{}) {
		return nil, errConnClosed
	}
	if len(calls) == 1 {
		c.keep(calls[0], t)
	}
	c.out.Flush()
	return nil, nil
}

// keep notes the ticket of call's frame, for its cancel to find; the
// tickets of frames written are let go each time the map has doubled, so
// that a server that does not read costs no more than a pass per doubling.
func (c *PipeConn) keep(call *proxy.Call, t wire.Ticket) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queued) >= c.pruneAt {
		for k, t := range c.queued {
			if t.Written() {
				delete(c.queued, k)
			}
		}
		c.pruneAt = max(64, 2*len(c.queued))
	}
	c.queued[call] = t
}

// Cancel implements Conn: if call's frame is still queued, both are let
// go, and the server never learns of either; if it is written (or being
// written), notice goes ahead of whatever is queued; otherwise (its frame
// went in a batch still queued) notice goes behind it.
func (c *PipeConn) Cancel(call *proxy.Call, notice []byte) error {
	c.mu.Lock()
	t, ok := c.queued[call]
	delete(c.queued, call)
	c.mu.Unlock()
	if ok && t.Withdraw() {
		c.o.Logger.Debug("a request still queued for the server was cancelled: withdrawn")
		return nil
	}
	b := wire.GetBufFor(len(notice) + 1)
	b.B = append(b.B, notice...)
	if ok && t.Written() {
		c.out.SendUrgent(b)
		return nil
	}
	c.out.SendNow(b)
	c.out.Flush()
	return nil
}

// Listen implements Conn: the server's lines, the answers to what it was
// sent among them, read by the caller. It ends with ErrSessionEnded when
// the server's output does (the server exited, or Close ended it): there
// is one.
func (c *PipeConn) Listen(context.Context) (Stream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.listening {
		return nil, errors.New("the server's output is already read")
	}
	c.listening = true
	return &pipeLines{c: c, rd: framing.NewReader(c.in, c.o.MaxFrameSize)}, nil
}

// Close implements Conn: what is queued for the server is written (within
// DrainWait), its input closed, and the server stopped (Stop), which ends
// its output.
func (c *PipeConn) Close() error {
	c.closeOnce.Do(func() {
		c.out.Close()
		drain := time.NewTimer(cmp.Or(c.o.DrainWait, DefaultGrace))
		select {
		case <-c.out.Dead():
		case <-drain.C: // the server does not read; Stop closes its input all the same
		}
		drain.Stop()
		if c.o.Stop != nil {
			c.o.Stop()
		}
	})
	return nil
}

// pipeLines is the server's output as a Stream (Lent: each line read
// into a frame buffer of its own, as the wrapper reads a server's lines).
type pipeLines struct {
	c    *PipeConn
	rd   *framing.Reader
	buf  []byte
	last int // the last line's size: big lines tend to follow big lines
	done bool
}

// NextBuf implements Lent: Next, the line read into a frame buffer that
// is the caller's.
func (p *pipeLines) NextBuf() (*wire.Buf, error) {
	if p.done {
		return nil, ErrSessionEnded
	}
	b := wire.GetBufFor(p.last + 1)
	line, err := p.rd.Read(b.B)
	if err != nil {
		wire.PutBuf(b)
		return nil, p.failed(err)
	}
	b.B, p.last = line, len(line)
	return b, nil
}

// Ready implements Lent: whether a whole line is buffered already, so
// that NextBuf would not wait (its reader writes out what it decided
// before a wait, a burst at a time).
func (p *pipeLines) Ready() bool { return p.rd.Ready() }

// Next implements Stream: the server's next line. A line over the size
// limit is skipped and reported as a *framing.FrameTooLargeError, after
// which the stream goes on.
func (p *pipeLines) Next() ([]byte, error) {
	if p.done {
		return nil, ErrSessionEnded
	}
	line, err := p.rd.Read(p.buf)
	if err != nil {
		return nil, p.failed(err)
	}
	p.buf = line[:0]
	if cap(line) > 1<<20 { // a rare large line's array is not kept
		p.buf = nil
	}
	return line, nil
}

// failed returns what a read's err means to the reader: a line over the
// limit, skipped, or the end of the server's output.
func (p *pipeLines) failed(err error) error {
	if _, ok := errors.AsType[*framing.FrameTooLargeError](err); ok {
		return err
	}
	p.done = true
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) && !errors.Is(err, os.ErrClosed) {
		p.c.o.Logger.Warn("reading the server's output failed", zap.Error(err))
	}
	return ErrSessionEnded
}

// Close implements Stream: the server's output is its session's.
func (p *pipeLines) Close() error { return p.c.Close() }

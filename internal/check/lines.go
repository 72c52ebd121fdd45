package check

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// Lines is the server as the checker talks to it, a client of its own
// that speaks lines: what the server says (In), where the checker's lines
// go (Out), and how to end the connection (Stop), after which In ends.
type Lines struct {
	In   io.Reader
	Out  io.Writer
	Stop func()
}

// OverConn returns a session of conn as Lines: each request the checker
// writes opens a call of its own, by its id (which the checker does not
// reuse while it is in flight), and a cancel names it, as a proxy
// session's core would; other lines go as they are. What every Stream of
// conn brings is read, one goroutine per Stream, into In, a message to a
// line; a message over the size limit is left out (the checker reports on
// cancellation, not framing).
func OverConn(conn upstream.Conn) Lines {
	c := &connLines{conn: conn, calls: map[framing.ID]*proxy.Call{}}
	c.in.more.L = &c.in.mu
	if st, err := conn.Listen(context.Background()); err == nil {
		c.read(st)
	}
	return Lines{In: &c.in, Out: c, Stop: c.stop}
}

// connLines is OverConn's: the checker's lines sent, the server's read.
type connLines struct {
	conn upstream.Conn
	in   lineQueue // In: each Stream's reader puts whole lines, never waiting

	mu    sync.Mutex // guards lines and calls: Write's, held while it sends
	lines framing.LineSplitter
	calls map[framing.ID]*proxy.Call // the checker's requests, by id

	rmu     sync.Mutex // guards the readers' count and stopped (never held while sending)
	readers sync.WaitGroup
	active  int  // readers running
	stopped bool // no Stream is read any more (end)
	once    sync.Once
}

// Write sends each whole line of p.
func (c *connLines) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines.Split(p, func(line []byte) bool {
		c.sendLocked(line)
		return true
	})
	return len(p), nil
}

// sendLocked sends one line; c.mu is held.
func (c *connLines) sendLocked(line []byte) {
	var f framing.Frame
	var calls []*proxy.Call
	var along upstream.Along
	if f.Parse(line) == nil && !f.Batch {
		m := &f.Msgs[0]
		along.Msg = m
		switch {
		case m.Kind == framing.KindRequest:
			call := new(proxy.Call)
			c.calls[m.ID] = call
			calls = []*proxy.Call{call}
		case m.Method == framing.MethodCancelled && c.calls[m.RequestID] != nil:
			c.conn.Cancel(c.calls[m.RequestID], line)
			delete(c.calls, m.RequestID)
			return
		}
	}
	if st, err := c.conn.Send(context.Background(), line, calls, along); err == nil && st != nil {
		c.read(st)
	}
}

// read writes each message st brings to In as a line, until it ends.
func (c *connLines) read(st upstream.Stream) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.stopped {
		st.Close()
		return
	}
	c.active++
	c.readers.Go(func() {
		defer c.readerDone()
		for {
			m, err := st.Next()
			if _, ok := errors.AsType[*framing.FrameTooLargeError](err); ok {
				continue
			}
			if errors.Is(err, upstream.ErrSessionEnded) { // the server's end: In ends once every Stream has
				c.end()
				c.conn.Close()
			}
			if err != nil {
				return
			}
			c.in.put(append(bytes.Clone(upstream.EventLine(m)), '\n')) // one line, though an event's data may span several
		}
	})
}

// end says no Stream is read any more: In ends once the last reader has.
func (c *connLines) end() {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.stopped = true
}

// readerDone ends In when the last reader ends after end.
func (c *connLines) readerDone() {
	c.rmu.Lock()
	c.active--
	last := c.active == 0 && c.stopped
	c.rmu.Unlock()
	if last {
		c.in.close()
	}
}

// stop closes the connection and returns once every Stream's reader has
// ended, and with them In (what they read is still read from it).
func (c *connLines) stop() {
	c.once.Do(func() {
		c.end()
		c.conn.Close()
		c.readers.Wait()
		c.in.close() // (the last reader closed it, if there was one)
	})
}

// lineQueue is In: lines put by the Streams' readers, which never wait
// for the checker, read as bytes.
type lineQueue struct {
	mu     sync.Mutex
	more   sync.Cond // signalled when a line comes, or at the end
	lines  [][]byte
	rest   []byte // the line being read
	closed bool
}

func (q *lineQueue) put(line []byte) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.lines = append(q.lines, line)
	q.more.Signal()
}

func (q *lineQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.more.Broadcast()
}

// Read implements io.Reader: the lines, then io.EOF once closed.
func (q *lineQueue) Read(p []byte) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.rest) == 0 {
		switch {
		case len(q.lines) > 0:
			q.rest, q.lines = q.lines[0], q.lines[1:]
		case q.closed:
			return 0, io.EOF
		default:
			q.more.Wait()
		}
	}
	n := copy(p, q.rest)
	q.rest = q.rest[n:]
	return n, nil
}

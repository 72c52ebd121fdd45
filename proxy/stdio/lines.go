package stdio

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/wire"
)

// Backend is one session's server as a stdio session talks to it (Lines
// over an upstream.Conn): the way to push it messages and to be pushed the server's,
// a way to end it, and a channel closed once it has.
type Backend interface {
	// Conn returns the server's side of the session: its messages pushed
	// (Push), the way to send it messages (Out), and, for a reader of
	// bytes, its lines (In).
	Conn() Conn
	// Stop ends the server: it closes its Conn (a stdio server's stop
	// ladder, an upstream's session); it may be called again.
	Stop()
	// Exited is closed once the server has ended.
	Exited() <-chan struct{}
}

// Lines is an upstream.Conn as a session reaches its server (a Backend):
// the session's frames go to the Conn message by message, each with the
// request it opens or cancels (its Out is a Sender), or, for a Conn that
// lends its own Outbox (a stdio server's), are queued there by the
// session (its Queue), and what every Stream of the Conn brings comes
// back to the session, handed to it by the goroutine that read it (a
// Pusher). One goroutine per Stream reads it, for as long as it brings
// messages.
type Lines struct {
	conn   upstream.Conn
	early  [][]byte // what came before the session asked (PushTo)
	exited chan struct{}

	one [1]*proxy.Call // SendFrame's: Send keeps no calls

	mu      sync.Mutex // guards readers' Add and stopped
	readers sync.WaitGroup
	stopped bool
	once    sync.Once

	// to is the session's, once it asked to be handed the messages
	// (PushTo); hand orders the hand-overs with PushTo's, so that what
	// came before it reaches the session first.
	hand sync.Mutex
	to   Receiver
	over bool // the messages have ended (ended): a later PushTo ends at once
}

// NewLines returns conn as a Backend, its session's own traffic (Listen)
// read from now on.
func NewLines(conn upstream.Conn) *Lines {
	l := &Lines{conn: conn, exited: make(chan struct{})}
	if st, err := conn.Listen(context.Background()); err == nil {
		l.read(st)
	}
	return l
}

// Conn implements Backend: a session pushed to (Push) or a reader of
// bytes (In); a session queues its frames in the Conn's own Outbox where
// it has one (a stdio server's, Queue), and else hands them to it (Out).
func (l *Lines) Conn() Conn {
	c := Conn{Out: linesOut{l}, Push: l}
	if q, ok := l.conn.(queued); ok {
		c.Queue = q.Outbox()
	}
	return c
}

// PipeServer is a server that reads stdin and writes stdout (a stdio
// server's pipes) as a session's Conn: Lines over an upstream.PipeConn.
func PipeServer(stdout io.Reader, stdin io.WriteCloser, o upstream.PipeOptions) Conn {
	return NewLines(upstream.NewPipeConn(stdout, stdin, o)).Conn()
}

// queued is a Conn whose way to its server is an Outbox a session may
// queue in itself (upstream.PipeConn).
type queued interface{ Outbox() *wire.Outbox }

// PushTo implements Pusher: from now on each message goes to r as
// it is read, and what came before (the session's own traffic, before its
// client's first frame) first.
func (l *Lines) PushTo(r Receiver) {
	l.hand.Lock()
	defer l.hand.Unlock()
	l.to = r
	early := l.early
	l.early = nil
	for _, frame := range early {
		r.Receive(frame, nil)
	}
	if l.over {
		r.End()
	}
}

// handOver hands one message to the session: pushed, or queued for a
// reader. parsed, if not nil, is m parsed by its Stream (upstream.Parsed): the
// session then does not parse it again.
func (l *Lines) handOver(m []byte, parsed *framing.Frame) {
	l.hand.Lock()
	defer l.hand.Unlock()
	switch {
	case l.to == nil:
		l.early = append(l.early, bytes.Clone(upstream.EventLine(m))) // kept: m is the Stream's until its next message
	case parsed != nil && !parsed.Batch && !bytes.ContainsAny(parsed.Msgs[0].Raw, "\r\n"):
		l.to.Receive(parsed.Msgs[0].Raw, parsed) // without the whitespace around it
	case bytes.ContainsAny(m, "\r\n"): // a message spread over lines (an event's data may be) goes as one
		l.to.Receive(upstream.EventLine(m), nil)
	default:
		l.to.Receive(m, nil)
	}
}

// tooLarge hands the session a message over the size limit, which the
// upstream.Stream skipped (a stdio server's over-long line), for it to answer as
// the relay answers one it reads (one that came before the session asked
// is left out).
func (l *Lines) tooLarge(tl *framing.FrameTooLargeError) {
	l.hand.Lock()
	defer l.hand.Unlock()
	if l.to != nil {
		l.to.TooLarge(tl)
	}
}

// ended says the messages have ended: to the session pushed to, or to a
// reader.
func (l *Lines) ended() {
	l.hand.Lock()
	defer l.hand.Unlock()
	l.over = true
	if l.to != nil {
		l.to.End()
	}
}

// Exited implements Backend.
func (l *Lines) Exited() <-chan struct{} { return l.exited }

// Stop implements Backend: the Conn is closed, and once every Stream has
// been read to its end, the session's lines end. A Conn whose server ended
// the session (upstream.ErrSessionEnded) stops its Lines so.
func (l *Lines) Stop() {
	l.once.Do(func() {
		l.mu.Lock()
		l.stopped = true
		l.mu.Unlock()
		go func() {
			l.conn.Close()
			l.readers.Wait()
			l.ended()
			close(l.exited)
		}()
	})
}

// read hands each message st brings to the session, until it ends.
func (l *Lines) read(st upstream.Stream) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		st.Close() // nobody reads it: its answer is let go as it comes
		return
	}
	l.readers.Add(1)
	if lent, ok := st.(upstream.Lent); ok {
		go l.readLent(lent)
		return
	}
	go func() {
		defer l.readers.Done()
		for {
			m, err := st.Next()
			if err != nil {
				if l.readEnds(err) {
					return
				}
				continue
			}
			var parsed *framing.Frame
			if p, ok := st.(upstream.Parsed); ok {
				parsed = p.Frame()
			}
			l.handOver(m, parsed)
		}
	}()
}

// readLent is read for a Stream that lends its frames' buffers (a stdio
// server's lines): each goes to the session as it is, not copied.
func (l *Lines) readLent(st upstream.Lent) {
	defer l.readers.Done()
	for {
		b, err := st.NextBuf()
		if err != nil {
			if l.readEnds(err) {
				return
			}
			continue
		}
		l.handOverBuf(b, st.Ready())
	}
}

// readEnds reports whether a Stream's err ends its reading: a message over
// the size limit, which the Stream skipped, does not (the session answers
// for it); the server's end of the session (upstream.ErrSessionEnded)
// stops the Lines too, which end once every stream has been read.
func (l *Lines) readEnds(err error) bool {
	if tl, ok := errors.AsType[*framing.FrameTooLargeError](err); ok {
		l.tooLarge(tl)
		return false
	}
	if errors.Is(err, upstream.ErrSessionEnded) {
		l.Stop()
	}
	return true
}

// handOverBuf is handOver of a message in a frame buffer, which the
// session takes as it is; more says another is buffered already.
func (l *Lines) handOverBuf(b *wire.Buf, more bool) {
	l.hand.Lock()
	defer l.hand.Unlock()
	if l.to == nil {
		l.early = append(l.early, bytes.Clone(b.B))
		wire.PutBuf(b)
		return
	}
	l.to.ReceiveBuf(b, more)
}

// linesOut is the session's way to its server.
type linesOut struct{ l *Lines }

// SendFrame implements Sender.
func (w linesOut) SendFrame(frame []byte, opens *proxy.Call, m *framing.Message) {
	var calls []*proxy.Call
	if opens != nil {
		w.l.one[0] = opens
		calls = w.l.one[:]
	}
	if st, err := w.l.conn.Send(context.Background(), frame, calls, upstream.Along{Msg: m}); err == nil && st != nil {
		w.l.read(st)
	}
}

// SendCancel implements Sender.
func (w linesOut) SendCancel(c *proxy.Call, notice []byte) { w.l.conn.Cancel(c, notice) }

// Write implements io.Writer, which a Conn's Out must: a session hands a
// Sender its frames (SendFrame), never bytes.
func (w linesOut) Write([]byte) (int, error) { return 0, errNoBytes }

var errNoBytes = errors.New("a session sends its server messages, not bytes")

// Close implements io.Closer: the session is done with its server.
func (w linesOut) Close() error {
	w.l.Stop()
	return nil
}

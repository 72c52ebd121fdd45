// Package joinwrite holds back a write on a client's connection so that it
// goes out with the next one, in one system call: the HTTP front's event
// streams use it to send an event and what follows it (the next event, the
// body's end) together.
package joinwrite

import (
	"errors"
	"net"
	"sync"
	"syscall"
)

// Fewer writes for relayed event streams. fasthttp flushes each chunk of a
// streamed response as it is written: an event, then, when the stream
// ends, the empty chunk that ends the body. That is two writes, and two
// wake-ups of the client, where the upstream's whole response (event and
// end) most often came in one read. So the relay holds each event's write
// on the client's connection (Conn) while it reads on from what the
// upstream has already sent: the next write on that connection, the next
// event or the body's end, goes out with it in one system call. Before the
// relay's goroutine can wait for the upstream (its next read of the
// upstream connection, upConn), the held write goes out: nothing the
// client is owed waits on the upstream.

// Listener returns ln with each connection it accepts a Conn, able to hold
// a write.
func Listener(ln net.Listener) net.Listener { return heldListener{ln} }

// Of returns c as a Conn, if it is one (a Listener accepted it).
func Of(c net.Conn) (*Conn, bool) {
	hc, ok := c.(*Conn)
	return hc, ok
}

// New returns c as a Conn.
func New(c net.Conn) *Conn { return &Conn{Conn: c} }

type heldListener struct{ net.Listener }

func (l heldListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &Conn{Conn: c}, nil
}

// maxHeld is the largest write a connection holds; a larger one is written
// at once (a copy that size, kept per connection, would cost more than the
// system call it saves).
const maxHeld = 16 << 10

// Conn is a client's connection whose next write can be held, to go out
// with the one after it.
type Conn struct {
	net.Conn
	mu   sync.Mutex // guards hold and held; held across writes, to keep them in order
	hold bool       // the next write is to be held
	held []byte

	rawOnce sync.Once // makes raw, rawErr (SyscallConn)
	raw     syscall.RawConn
	rawErr  error
}

// NetConn returns the connection c wraps.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// HoldNext holds the next write, up to maxHeld bytes, until the write
// after it, Release, or Close.
func (c *Conn) HoldNext() {
	c.mu.Lock()
	c.hold = true
	c.mu.Unlock()
}

// Write writes p after what is held, in one system call, unless p is to be
// held itself.
func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hold && len(c.held)+len(p) <= maxHeld {
		c.hold = false
		c.held = append(c.held, p...)
		return len(p), nil
	}
	c.hold = false
	if len(c.held) == 0 {
		return c.Conn.Write(p)
	}
	bufs := net.Buffers{c.held, p}
	n, err := bufs.WriteTo(socketOf(c.Conn)) // one writev on the socket itself
	n -= int64(len(c.held))
	c.held = shrink(c.held)
	if err != nil {
		return max(int(n), 0), err
	}
	return len(p), nil
}

// socketOf returns the connection under wrappers that give theirs
// (NetConn, as the front's bounded listener's do, whose writes pass
// through): net.Buffers writes to a socket in one writev, to anything else
// buffer by buffer.
func socketOf(c net.Conn) net.Conn {
	for {
		n, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return c
		}
		c = n.NetConn()
	}
}

// Release writes what is held, and holds nothing more.
func (c *Conn) Release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hold = false
	if len(c.held) > 0 {
		c.Conn.Write(c.held) // an error shows again at the next write, or the read
		c.held = shrink(c.held)
	}
}

// shrink empties b, and lets go of it if it grew large: an idle
// connection keeps little.
func shrink(b []byte) []byte {
	if cap(b) > 4<<10 {
		return nil
	}
	return b[:0]
}

// Close writes what is held, then closes the connection.
func (c *Conn) Close() error {
	c.Release()
	return c.Conn.Close()
}

// SyscallConn gives the connection's own (for a close watcher), made at
// the first call: a watcher asks for it at every request of the
// connection's.
func (c *Conn) SyscallConn() (syscall.RawConn, error) {
	c.rawOnce.Do(func() {
		c.rawErr = errors.ErrUnsupported
		if sc, ok := c.Conn.(syscall.Conn); ok {
			c.raw, c.rawErr = sc.SyscallConn()
		}
	})
	return c.raw, c.rawErr
}

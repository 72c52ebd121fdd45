package upstream

import (
	"net"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/keepalive"
)

// upConn is a connection to the upstream that runs a function, once,
// before it next reads from the kernel: the relay's release of its
// client's held write. What the HTTP client has already buffered is read
// without it.
type Link struct {
	net.Conn
	local upAddr
	// OnRead, when set, runs once before the next read from the kernel.
	OnRead atomic.Pointer[func()]
}

// upAddr is an upConn's local address, which a fasthttp response gives
// back (Response.LocalAddr): it leads from the response to its connection.
type upAddr struct {
	net.Addr
	c *Link
}

func (c *Link) Read(p []byte) (int, error) {
	if f := c.OnRead.Swap(nil); f != nil {
		(*f)()
	}
	return c.Conn.Read(p)
}

func (c *Link) LocalAddr() net.Addr { return &c.local }

// upstreamConnOf returns the connection a response is read from, if it is
// an upConn.
func LinkOf(resp *fasthttp.Response) *Link {
	if a, ok := resp.LocalAddr().(*upAddr); ok {
		return a.c
	}
	return nil
}

// dialUpstream dials an upstream connection as fasthttp would (its dialer,
// with its DNS cache), as an upConn.
func dialUpstream(addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	var err error
	if timeout > 0 {
		c, err = fasthttp.DialTimeout(addr, timeout)
	} else {
		c, err = fasthttp.Dial(addr)
	}
	if err != nil {
		return nil, keepalive.DialFailed(err)
	}
	return newUpConn(addr, c), nil
}

// newUpConn wraps a connection just dialled to addr as an upConn, watched
// for the server's idle close (keepalive.Wrap).
func newUpConn(addr string, c net.Conn) *Link {
	u := &Link{Conn: keepalive.Wrap(addr, c)}
	u.local = upAddr{Addr: c.LocalAddr(), c: u}
	return u
}

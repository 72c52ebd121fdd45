package upstream

import (
	"context"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/wire"
)

// Conn is one client session's connection to its server, message by
// message: what the core decided is sent with the requests it opens, each
// request's answer comes back on a Stream of its own, and a cancel names
// the request it ends (a *proxy.Call), never an id, so that a reused or
// shared id cannot mislead it. How a cancel is carried (a POSTed
// notification, the close of the request's stream, both) is the Conn's to
// decide, by the request's revision.
//
// Send, Listen and Cancel keep the order they are called in: a frame goes
// after the ones sent before it, and a cancel after the request it names.
// Close returns once every goroutine the Conn started has ended.
type Conn interface {
	// Send sends one frame (the core's bytes, which Send copies), which
	// opens calls (none for a notification or a response; Send keeps the
	// calls, not the slice), and returns the
	// Stream of what answers it: nothing, the server's messages, or the
	// proxy's own error in place of an answer that cannot come. ctx ends
	// the wait for the answer's headers; it does not cancel the request.
	Send(ctx context.Context, frame []byte, calls []*proxy.Call, a Along) (Stream, error)
	// Listen returns the Stream of the server's messages that answer no
	// request of the client's: its own requests and notifications.
	Listen(ctx context.Context) (Stream, error)
	// Cancel carries the core's accepted cancel of c; notice is the
	// cancel's frame as the server is to see it.
	Cancel(c *proxy.Call, notice []byte) error
	// Close ends the session upstream and every Stream of it.
	Close() error
}

// Stream is what answers one frame, or the session's own traffic
// (Listen), one message at a time.
type Stream interface {
	// Next returns the next message, valid until the next call, or io.EOF
	// once the stream has ended; a *framing.FrameTooLargeError says a
	// message over the size limit was skipped (a stdio server's line),
	// and the stream goes on. One goroutine calls it.
	Next() ([]byte, error)
	// Close ends the stream; it may race Next, which it unblocks.
	Close() error
}

// Lent is a Stream that reads each message into a frame buffer of its
// own and gives it away whole (a stdio server's lines, read as the wrapper
// reads them), so that its reader keeps the frame without copying it.
type Lent interface {
	// NextBuf is Next whose message comes in b (b.B, without its
	// newline), which is the caller's from then on: to free with
	// wire.PutBuf, or to hand on.
	NextBuf() (b *wire.Buf, err error)
	// Ready reports whether the next NextBuf returns without waiting (a
	// whole message is buffered), so that its reader can write out what
	// it decided of a burst before it waits.
	Ready() bool
}

// Parsed is a Stream that parsed some of what it brings (a JSON answer,
// which it checks before it passes it on), so that its reader need not
// parse it again.
type Parsed interface {
	// Frame returns what the message Next returned last was parsed into
	// (its messages' Raw alias that message), or nil where it was not
	// parsed; valid until the next call of Next.
	Frame() *framing.Frame
}

// Along is what goes with a frame besides its bytes.
type Along struct {
	// Msg, if not nil, is the frame parsed (one message, not a batch; its
	// spans index the frame), so that the Conn need not parse it again.
	Msg *framing.Message
	// From, if not nil, is the client's HTTP request the frame came in
	// (its headers go on: see Request.From).
	From *fasthttp.Request
}

// Package stream is the HTTP front's response stream to a client, the one
// type every front's stream is: a Stream, whose state moves only forward
// (open; grace, once every request it carries was cancelled; lingering,
// the client's side over and the upstream's still read; ended), and
// Events, a Stream with a queue of events that a session of lines feeds.
// The relay reads a Streamable HTTP upstream's response into a Stream's
// body; a session of lines routes its server's messages to Events.
package stream

import (
	"errors"
	"io"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
)

// ErrCancelled ends a stream whose requests were cancelled: its upstream
// body is closed with it.
var ErrCancelled = errors.New("the request this stream answers was cancelled")

// state is where a response stream stands.
type state uint8

const (
	// open: the upstream's response is relayed as it comes.
	open state = iota
	// grace: every request it was to answer was cancelled; it stays open
	// for the grace, so that the server's cancels of its own nested
	// requests reach the client, then is released.
	grace
	// lingering: released, the client's side is over (Quit is closed),
	// and the upstream's is still read for the linger, so that a late
	// answer reaches the tracker and the policy's hooks.
	lingering
	// ended: the upstream's body is closed, or was never taken.
	ended
)

// Stream is one response stream to the client; its state moves only
// forward, open to ended, under its lock. The front ends it early
// (closing the upstream body) when the request it was to answer is
// cancelled. Its Clock is set before it is used.
type Stream struct {
	// Clock runs the stream's grace and linger. Required.
	Clock clock.Clock
	// linger, when set, is how long the upstream's answer is still read
	// after the client's stream ends for a cancel; quit is closed when the
	// stream starts to linger. Both are set before the stream is shared.
	linger time.Duration
	quit   chan struct{}

	mu    sync.Mutex // guards the fields below
	state state
	// kept: a lingering stream is read on past its linger, until
	// StopKeeping (a cancel the policy defers: a re-issue may want the
	// answer).
	kept  bool
	body  fasthttp.ReadCloserWithError
	timer clock.Timer // the grace's
	// final, when set, is the proxy's own answer that ends the stream (a
	// request's deadline passed).
	final []byte
	done  chan struct{} // closed when the stream is ended; made by Watched
	cut   bool          // ended by the front, not at the upstream's end
	// wake, if set before the stream is shared, is signalled once it has
	// ended, after its body was closed: an Events' reader waits on it.
	wake chan struct{}
}

// New returns a stream whose timers run on clk.
func New(clk clock.Clock) *Stream { return &Stream{Clock: clk} }

// LingerFor makes the stream read on for d after its cancel; before the
// stream is shared.
func (st *Stream) LingerFor(d time.Duration) {
	st.linger, st.quit = d, make(chan struct{})
}

// Quit is closed when the client's side of a lingering stream is over; nil
// for a stream that does not linger.
func (st *Stream) Quit() <-chan struct{} { return st.quit }

// release ends the client's side of the stream after a cancel: at once
// the upstream's too, or, when the stream lingers, after the linger.
func (st *Stream) release() {
	st.mu.Lock()
	if st.quit == nil || st.linger <= 0 && !st.kept {
		st.mu.Unlock()
		st.CloseWithError(ErrCancelled)
		return
	}
	defer st.mu.Unlock()
	if st.state >= lingering {
		return
	}
	st.state = lingering
	close(st.quit)
	if !st.kept {
		st.Clock.AfterFunc(st.linger, func() { st.CloseWithError(ErrCancelled) })
	}
}

// Keep has a stream that lingers (LingerFor) read on after its cancel
// until StopKeeping, not only for its linger; before the stream is
// shared.
func (st *Stream) Keep() { st.kept = true }

// StopKeeping ends what Keep started: a stream lingering already is read
// on for its linger from now, then ended; one not yet released lingers
// as any other.
func (st *Stream) StopKeeping() {
	st.mu.Lock()
	defer st.mu.Unlock()
	if !st.kept {
		return
	}
	st.kept = false
	if st.state == lingering {
		st.Clock.AfterFunc(st.linger, func() { st.CloseWithError(ErrCancelled) })
	}
}

// Watched returns a channel closed when the stream is ended.
func (st *Stream) Watched() <-chan struct{} {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.done == nil {
		st.done = make(chan struct{})
		if st.state == ended {
			close(st.done)
		}
	}
	return st.done
}

// Ended reports whether the stream has ended.
func (st *Stream) Ended() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.state == ended
}

// Finish ends the client's side of the stream with the proxy's own last
// message (a deadline's error): at once the upstream's too, or, when the
// stream lingers, after the linger, as release does after a cancel, so
// that a late answer still reaches the tracker and the policy's hooks.
// The message is kept even on a stream already ended: a JSON answer read
// whole ends its stream before it is decided, and the front that then
// finds it suppressed writes this message instead (before, the client got
// an empty body).
func (st *Stream) Finish(msg []byte) {
	st.mu.Lock()
	st.final = msg
	st.mu.Unlock()
	st.release()
}

// WasCut reports whether the front ended the stream early.
func (st *Stream) WasCut() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.cut
}

// TakeFinal returns the stream's last message (Finish's), once.
func (st *Stream) TakeFinal() []byte {
	st.mu.Lock()
	defer st.mu.Unlock()
	f := st.final
	st.final = nil
	return f
}

// SetBody hands the stream its upstream body; it reports false, closing
// the body, if the stream was already ended.
func (st *Stream) SetBody(rc fasthttp.ReadCloserWithError) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.state == ended {
		rc.CloseWithError(ErrCancelled)
		return false
	}
	st.body = rc
	return true
}

// EndAfter starts the grace of an open stream: it is released after d
// (no grace: now, not after a turn of the clock).
func (st *Stream) EndAfter(d time.Duration) {
	st.mu.Lock()
	if st.state != open {
		st.mu.Unlock()
		return
	}
	st.state = grace
	if d > 0 {
		st.timer = st.Clock.AfterFunc(d, st.release)
	}
	st.mu.Unlock()
	if d <= 0 {
		st.release()
	}
}

// CloseWithError ends the stream: its upstream body is closed with why
// (nil or io.EOF: at the upstream's end, else cut short by the front).
func (st *Stream) CloseWithError(why error) {
	st.mu.Lock()
	if st.state == ended {
		st.mu.Unlock()
		return
	}
	st.state = ended
	st.cut = why != nil && why != io.EOF
	body := st.body
	if st.timer != nil {
		st.timer.Stop()
	}
	if st.done != nil {
		close(st.done)
	}
	st.mu.Unlock()
	if body != nil {
		body.CloseWithError(why)
	}
	if st.wake != nil {
		select {
		case st.wake <- struct{}{}:
		default:
		}
	}
}

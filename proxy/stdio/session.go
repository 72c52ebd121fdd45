package stdio

import (
	"cmp"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/wire"
)

// Defaults for Options.
const (
	DefaultDrainWait = 5 * time.Second
)

// Options configures a Session. The zero value is usable.
type Options struct {
	// Logger receives the session's logs. If nil, nothing is logged.
	Logger *zap.Logger
	// MaxFrameSize is the longest line accepted from either side, in bytes.
	// If zero, framing.DefaultMaxFrameSize.
	MaxFrameSize int
	// RetireAfter is how long a cancelled request is remembered, so that its
	// late response and progress are recognised as such. A response that
	// comes later still never reaches the issuer: it is dropped as unknown.
	// If zero, proxy.DefaultRetireAfter.
	RetireAfter time.Duration
	// RetireMax bounds how many cancelled requests are remembered per
	// direction. If zero, proxy.DefaultRetireMax.
	RetireMax int
	// Now is the clock. If nil, time.Now.
	Now func() time.Time
	// OnEvent, if set, is called for every decision the proxy makes, on the
	// relay goroutine that made it, in order for each direction. It must not block.
	OnEvent func(proxy.Event)
	// OnClientClosed, if set, is called once, on the client's relay
	// goroutine, when the client's input has ended and what was queued for
	// the server has been written and its input closed (or DrainWait has
	// passed with the server not reading): the caller starts stopping the
	// server there.
	OnClientClosed func()
	// DrainWait bounds how long, after the client's input ends, what is
	// queued for the server may take to be written before OnClientClosed
	// is called anyway. If zero, DefaultDrainWait.
	DrainWait time.Duration
	// Governor, if set, makes the session's Governor, given the session's
	// Actions: per-request policy.
	Governor func(proxy.Actions) proxy.Governor
	// OnRestart, if set, is what proxy.Actions.Restart does: it stops the server
	// and starts another (the stdio wrapper's escalation). Without it,
	// Restart reports false.
	// DeferCancels lets the policy keep a client's cancel from the server
	// a while (reissue: join, whose re-issues join the call it would
	// stop): proxy.SessionOptions.DeferCancels. The session keeps reading
	// the server's answer all the same, so the wrapper and the bridge set
	// it.
	DeferCancels bool
	// Principal, if set, says the session is several clients' (the stdio
	// server an HTTP front shares among requests without a session):
	// proxy.SessionOptions.Principal.
	Principal func(c *proxy.Call) (string, bool)
	// Peer, if set, names the session's client (proxy.SessionOptions.Peer);
	// a session several clients share (with Deliver) names each frame's
	// by Submit's From.
	Peer      func(c *proxy.Call) string
	OnRestart func(reason string) bool
	// LogPayloads: see proxy.TrackerOptions.
	LogPayloads bool
	// OnNotified, if set, is told, for each cancel the session sends the
	// server, how long after the cancel was accepted its notification was
	// written whole to the server's input (a server that does not read
	// makes it wait). It runs on the writing goroutine and must not block.
	OnNotified func(time.Duration)
	// NewTracer, if set, makes the session's tracer (see proxy.Tracer).
	NewTracer func() proxy.Tracer
	// Observer and OnCancel, if set, count the session's decisions and its
	// accepted cancels, for metrics (see proxy.TrackerOptions).
	Observer proxy.Observer
	// Totals, if set, gets the session's counts besides its own Stats (an
	// HTTP front's, for all its sessions).
	Totals   *proxy.Counters
	OnCancel func(proxy.Source)
	// Deliver, if set, takes every frame for the client in place of the
	// client's Out, with the request it is about (see Deliver); the
	// client's frames then come through Submit, which says what each
	// opened and ended, while In serves only to end the session (an HTTP
	// front that routes each answer to the stream its request came on).
	// The wrapper leaves it unset.
	Deliver Deliver
	// AllowSharedIDs: see proxy.TrackerOptions (requests that share an id,
	// each on a stream of its own: Deliver).
	AllowSharedIDs bool
}

// Deliver takes each frame for the client in place of the client's Out
// (Options.Deliver): see wire.Deliver.
type Deliver = wire.Deliver

// Sender is a server reached message by message (an upstream.Conn): see
// wire.Sender.
type Sender = wire.Sender

// Conn is one peer as the session reaches it. A client is a pair of byte
// streams (In, Out), or, when its front submits its frames (Submit) and
// takes what it is sent (Options.Deliver), neither: CloseClient then ends
// its side. A server is always an upstream.Conn, as Lines (or PipeServer)
// makes it: it pushes its frames (Push) and takes the session's, queued
// in its own Outbox (Queue, a stdio server's pipe) or handed to it (Out,
// a Sender).
type Conn struct {
	In  io.ReadCloser  // the client's frames
	Out io.WriteCloser // frames to the peer
	// Push is a server's: it hands the session its frames itself
	// (Pusher).
	Push Pusher
	// Queue, if set in place of Out, is the server's own way in, in which
	// the session queues its frames itself (a stdio server's pipe,
	// upstream.PipeConn.Outbox).
	Queue *wire.Outbox
}

// ErrServerGone is returned by Run when the server's output ended while the
// client was still connected.
var ErrServerGone = errors.New("server closed its output while the client was connected")

// Session relays one client and one server over byte streams (stdio).
// Create it with NewSession and call Run once. What becomes of each frame
// is decided by its proxy.Session; the Session carries it out.
type Session struct {
	opts  Options
	core  *proxy.Session
	t     *proxy.Tracker // core's
	sides [2]*side       // set by Run, under core's lock
	// clientClosed is set once the client's input has ended; serverGone
	// once the server's output has, just before Run closes the client's input.
	clientClosed, serverGone atomic.Bool
	readerDone               chan struct{} // see ReaderDone
	clientEnd                sync.Once     // the end of the client's side, once: its reader's, or CloseClient's
	// from is the client whose frame Submit decides (Options.Principal,
	// Options.Peer); set under the core's lock.
	from    From
	running chan struct{} // closed once Run has set sides up
}

// NewSession returns a Session configured by opts.
func NewSession(opts Options) *Session {
	s := &Session{opts: opts, readerDone: make(chan struct{}), running: make(chan struct{})}
	var tracer proxy.Tracer
	if opts.NewTracer != nil {
		tracer = opts.NewTracer()
	}
	principal, peer := opts.Principal, opts.Peer
	if principal != nil && opts.Deliver != nil { // Submit's
		principal = func(*proxy.Call) (string, bool) { return s.from.Principal, true }
		if peer != nil {
			peer = func(*proxy.Call) string { return s.from.Peer }
		}
	}
	s.core = proxy.NewSession(proxy.SessionOptions{
		Tracker: proxy.TrackerOptions{
			Logger: opts.Logger, RetireAfter: opts.RetireAfter, RetireMax: opts.RetireMax,
			Now: opts.Now, OnEvent: opts.OnEvent, LogPayloads: opts.LogPayloads, Tracer: tracer,
			Observer: opts.Observer, OnCancel: opts.OnCancel, Totals: opts.Totals, AllowSharedIDs: opts.AllowSharedIDs},
		Governor: opts.Governor, Carrier: carrier{s}, Restart: opts.OnRestart, DeferCancels: opts.DeferCancels,
		Principal: principal, Peer: peer})
	s.t = s.core.Tracker()
	return s
}

// Stats returns the session's counters so far.
func (s *Session) Stats() proxy.Stats { return s.t.Stats() }

// Invalid accounts for a client's frame that a front refused before it
// reached the relay (it does not parse), and returns the error owed to the
// client, as the relay would have answered it.
func (s *Session) Invalid(err error, raw []byte) []byte { return s.t.Invalid(proxy.Client, err, raw) }

// ReaderDone is closed once Run's reader of the client has stopped, which
// may be after Run returns: a caller whose client.In wakes when closed (a
// pipe of its own) waits on it to know that the session is wholly over.
// Without a reader (client.In nil), it is closed once CloseClient's work
// is done, or with Run's end if CloseClient was not called.
func (s *Session) ReaderDone() <-chan struct{} { return s.readerDone }

// CloseClient ends the client's side of a session whose front submits its
// frames (Run's client.In nil), as the end of its input would: nothing
// more is submitted, the server gets what was queued for it, then
// OnClientClosed runs. It does not wait (ReaderDone tells when that is
// done); a second call does nothing.
func (s *Session) CloseClient() {
	s.clientEnd.Do(func() {
		go func() {
			<-s.running
			s.clientEnded()
		}()
	})
}

// Abandon ends a session that was never started (neither Run nor Start
// was called, and neither will be): nothing was relayed, and its governor
// is closed.
func (s *Session) Abandon() {
	if gov := s.core.Governor(); gov != nil {
		gov.Close()
	}
}

// InFlight returns how many requests are in flight in each direction.
func (s *Session) InFlight() (clientToServer, serverToClient int) { return s.t.InFlight() }

// Run relays between client and server until the server's output ends.
// When the client's input ends first, Run closes the server's input, calls
// OnClientClosed, and keeps relaying the server's output until it ends; it
// then returns nil. When the server's output ends first, every request of
// the client still in flight is answered with a CodeServerGone error, and
// Run returns ErrServerGone. Either way Run closes client.Out and the
// server's way in, and closes client.In to stop the client's reader
// without waiting for it (ReaderDone tells when it has stopped).
func (s *Session) Run(client, server Conn) error {
	ended := make(chan struct{})
	s.setup(client, server, func() { close(ended) })
	if client.In != nil { // else the front submits, and CloseClient ends its side
		go func() {
			s.relay(s.sides[proxy.Client], client.In)
			s.clientEnd.Do(s.clientEnded)
		}()
	}
	<-ended
	s.serverEnded()
	return s.finish(client)
}

// Start is Run for a front whose client's frames are submitted (Submit)
// and taken (Options.Deliver), with no goroutine of its own while the
// session lasts: it returns at once, and done is called, once, with what
// Run would have returned, once the server's side has ended, by a
// goroutine started when the server says its frames have (its Receiver's
// End).
func (s *Session) Start(server Conn, done func(error)) {
	s.setup(Conn{}, server, func() {
		go func() {
			s.serverEnded()
			done(s.finish(Conn{}))
		}()
	})
}

// setup readies the session's two sides and hands the server the
// session's Receiver, whose End calls ended, before the client can send
// anything.
func (s *Session) setup(client, server Conn, ended func()) {
	toClient, toServer := wire.NewOutbox(client.Out), server.Queue
	if toServer == nil {
		toServer = wire.NewOutbox(server.Out)
	}
	if s.opts.Deliver != nil {
		toClient.HandTo(s.opts.Deliver)
	}
	s.core.Lock() // CancelAll may come at once (a session stopped as it starts)
	s.sides[proxy.Client] = &side{peer: proxy.Client, out: toServer, back: toClient}
	s.sides[proxy.Server] = &side{peer: proxy.Server, out: toClient, back: toServer}
	s.core.Unlock()
	server.Push.PushTo(&receiver{s: s, then: ended})
	close(s.running)
}

// serverEnded notes that the server's frames have ended.
func (s *Session) serverEnded() { s.t.Logger(proxy.Server).Debug("input ended") }

// finish ends the session once the server's side has: what the client
// still waits for is answered (unless its side ended first), the outboxes
// are closed and drained, the client's input closed, the governor closed.
func (s *Session) finish(client Conn) error {
	err := error(nil)
	if !s.clientClosed.Load() {
		err = ErrServerGone
		for _, r := range s.t.FailInFlight("the MCP server exited before answering") {
			s.replyAbout(s.sides[proxy.Client], r.Frame, r.To, true)
		}
	}
	toServer, toClient := s.sides[proxy.Client].out, s.sides[proxy.Client].back
	toServer.Close()
	toClient.Close()
	<-toClient.Dead()
	<-toServer.Dead()
	s.serverGone.Store(true)
	if client.In != nil {
		client.In.Close()
	} else {
		s.clientEnd.Do(func() { close(s.readerDone) }) // nobody closed it: nothing to end
	}
	if gov := s.core.Governor(); gov != nil {
		gov.Close()
	}
	return err
}

// clientEnded ends the client's side once its input has ended (or its
// front closed it): the server gets what was queued for it (the last
// cancels, say) before anyone stops it, unless it does not read; then
// OnClientClosed runs, and ReaderDone is closed.
func (s *Session) clientEnded() {
	defer close(s.readerDone)
	s.clientClosed.Store(true)
	toServer := s.sides[proxy.Client].out
	toServer.Close()
	drain := time.NewTimer(cmp.Or(s.opts.DrainWait, DefaultDrainWait))
	select {
	case <-toServer.Dead():
	case <-drain.C:
	}
	drain.Stop()
	if s.opts.OnClientClosed != nil && !s.serverGone.Load() {
		s.opts.OnClientClosed()
	}
}

// relay reads the client's frames until its input ends, and writes out
// what it decided of each burst before it waits for the next.
func (s *Session) relay(from *side, in io.Reader) {
	rd := framing.NewReader(in, s.opts.MaxFrameSize)
	var f framing.Frame
	last := 0 // the last frame's size: big frames tend to follow big frames
	for {
		b := wire.GetBufFor(last + 1)
		frame, err := rd.Read(b.B)
		b.B, last = frame, len(frame)
		var tl *framing.FrameTooLargeError
		switch {
		case err == nil:
			s.handleFrame(from, &f, b)
		case errors.As(err, &tl):
			wire.PutBuf(b)
			s.tooLarge(from, tl)
		default:
			wire.PutBuf(b)
			from.out.Flush()
			log := s.t.Logger(from.peer)
			if err != io.EOF && !s.serverGone.Load() {
				log.Warn("reading failed", zap.Error(err))
			}
			log.Debug("input ended")
			return
		}
		if !rd.Ready() { // the next read waits: write out this burst first
			from.out.Flush()
		}
	}
}

package stdio

import (
	"errors"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/wire"
)

// Submitted is what Submit decided of one frame of the client's, for the
// front to route what comes back.
type Submitted struct {
	// Requests are the requests the frame opened (held ones among them):
	// what the session delivers about each is theirs.
	Requests []*proxy.Call
	// Ended are the requests the frame's cancels ended for the client
	// (accepted, kept for the governor, or withdrawn before they were
	// sent): nothing more is delivered about them.
	Ended []*proxy.Call
	// Replies are the proxy's own answers for the sender: refusals of
	// what the frame held, in order.
	Replies [][]byte
	one     [1]*proxy.Call // Requests' array for a lone request
}

// ErrEnded is Submit's error once the session has ended.
var ErrEnded = errors.New("the session has ended")

// From is who sent a frame to a session several clients share: the digest
// of its credential ("" for none) and its address.
type From struct{ Principal, Peer string }

// Submit decides one frame of the client's (Options.Deliver), as the
// front parsed it (a frame that does not parse is the front's to refuse:
// Invalid), and sends the server what passes: the front's way in, in
// place of the client's In, so that it learns which requests the frame
// opened and ended; the frame is not parsed again. open
// is called with the decision before anything of the frame can reach the
// server, so that the front routes the answers before they can come.
// parent is the trace context the frame came in, if any; from, its client
// (Options.Principal, Options.Peer). Submit never waits for a
// server that does not read (its frames queue, as the HTTP bodies that
// brought them were bounded); it waits for Run to have started.
func (s *Session) Submit(f *framing.Frame, parent proxy.TraceContext, from From, open func(*Submitted)) error {
	<-s.running
	s.core.Lock()
	defer s.core.Unlock()
	if s.clientClosed.Load() || s.serverGone.Load() {
		return ErrEnded
	}
	s.from = from
	defer func() { s.from = From{} }()
	if f.Batch {
		s.submitBatch(f, parent, open)
	} else {
		s.submitOne(&f.Msgs[0], parent, open)
	}
	s.sides[proxy.Client].out.Flush()
	return nil
}

// submitOne is Submit of a frame of one message, as the core decides it.
func (s *Session) submitOne(m *framing.Message, parent proxy.TraceContext, open func(*Submitted)) {
	o := s.core.Decide(proxy.Client, m, parent)
	var sub Submitted
	if o.Reply != nil {
		sub.Replies = [][]byte{o.Reply}
	}
	if o.Request != nil {
		sub.one[0] = o.Request
		sub.Requests = sub.one[:]
	}
	if o.Cancelled != nil { // accepted, kept for the governor, or withdrawn
		sub.Ended = append(sub.Ended, o.Cancelled)
	}
	for _, mc := range o.More {
		sub.Ended = append(sub.Ended, mc.Call)
	}
	open(&sub)
	b := wire.GetBuf()
	b.B = append(b.B, m.Raw...)
	s.keepMessage(s.sides[proxy.Client], o, b, m)
	s.carry(s.sides[proxy.Client], o, b, true)
}

// submitBatch is Submit of a batch, decided as a whole (DecideFrame): a
// request in it that the governor holds waits in a buffer of its own.
func (s *Session) submitBatch(f *framing.Frame, parent proxy.TraceContext, open func(*Submitted)) {
	var held map[*proxy.Call]*wire.Buf
	p := s.core.DecideFrame(proxy.Client, f, parent, func(c *proxy.Call) any {
		if held == nil {
			held = map[*proxy.Call]*wire.Buf{}
		}
		b := wire.GetBuf()
		held[c] = b
		return b
	})
	sub := &Submitted{Requests: p.Requests, Replies: p.Replies}
	sub.Ended = append(append(append(sub.Ended, p.Cancels...), p.Deferred...), p.WithdrawnCalls...)
	for _, mc := range p.More {
		sub.Ended = append(sub.Ended, mc.Call)
	}
	open(sub)
	data := p.Data
	if len(held) > 0 {
		gone := make(map[*proxy.Call]bool, len(held))
		for i, c := range p.KeptCalls {
			if b := held[c]; b != nil {
				b.B = append(b.B, p.Kept[i]...)
				gone[c] = true
			}
		}
		data = p.Rebuild(gone)
	}
	to := s.sides[proxy.Client].out
	if data != nil {
		b := wire.GetBuf()
		b.B = append(b.B, data...)
		to.SendNow(b)
	}
	for _, mc := range p.More {
		b := wire.GetBuf()
		b.B = append(b.B, mc.Notice...)
		s.sendNotice(s.sides[proxy.Client], mc.Call, b)
	}
}

// Cancel cancels c, a request of the client's, on its behalf, as from
// source for reason (its stream closed), if it is still in flight:
// proxy.Session.Cancel. It reports whether c was in flight.
func (s *Session) Cancel(c *proxy.Call, source proxy.Source, reason string) bool {
	return s.core.Cancel(c, source, reason, nil)
}

// Left tells the session that the client left the stream of c's answer,
// where leaving is no cancel: proxy.Session.Left.
func (s *Session) Left(c *proxy.Call) bool { return s.core.Left(c) }

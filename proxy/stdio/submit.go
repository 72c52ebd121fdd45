package stdio

import (
	"errors"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
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
}

// ErrEnded is Submit's error once the session has ended.
var ErrEnded = errors.New("the session has ended")

// Submit decides one frame of the client's (Options.Deliver) and sends
// the server what passes: the front's way in, in place of the client's
// In, so that it learns which requests the frame opened and ended. open
// is called with the decision before anything of the frame can reach the
// server, so that the front routes the answers before they can come.
// parent is the trace context the frame came in, if any; principal, the
// credential of its client (Options.Principal).
func (s *Session) Submit(frame []byte, parent proxy.TraceContext, principal string, open func(*Submitted)) error {
	<-s.running // Run is under way (lines.Session.Start runs it as it starts)
	s.core.Lock()
	defer s.core.Unlock()
	if s.clientClosed.Load() || s.serverGone.Load() {
		return ErrEnded
	}
	to := s.sides[proxy.Client].out
	var f framing.Frame
	if err := f.Parse(frame); err != nil {
		open(&Submitted{Replies: [][]byte{s.t.Invalid(proxy.Client, err, frame)}})
		return nil
	}
	held := map[*proxy.Call]*buf{}
	s.principal = principal
	p := s.core.DecideFrame(proxy.Client, &f, parent, func(c *proxy.Call) any {
		b := getBuf()
		held[c] = b
		return b
	})
	s.principal = ""
	sub := &Submitted{Requests: p.Requests, Replies: p.Replies}
	sub.Ended = append(append(append(sub.Ended, p.Cancels...), p.Deferred...), p.WithdrawnCalls...)
	for _, mc := range p.More {
		sub.Ended = append(sub.Ended, mc.Call)
	}
	open(sub)
	for i, c := range p.KeptCalls { // a held request waits in its buffer for the governor
		if b := held[c]; b != nil {
			b.b = append(b.b, p.Kept[i]...)
		}
	}
	data := p.Data
	if len(held) > 0 {
		gone := make(map[*proxy.Call]bool, len(held))
		for c := range held {
			gone[c] = true
		}
		data = p.Rebuild(gone)
	}
	s.queue(to, &f, &p, data)
	to.flush()
	return nil
}

// queue queues what is left of a client's frame for the server: a lone
// cancel ahead of what waits (or withdrawing its request, still queued),
// a lone request with its ticket kept, anything else as it comes; then
// the cancels of the other requests under a cancelled id.
func (s *Session) queue(to *outbox, f *framing.Frame, p *proxy.Plan, data []byte) {
	if data != nil {
		b := getBuf()
		b.b = append(b.b, data...)
		switch {
		case !f.Batch && len(p.Cancels) == 1:
			s.sendNotice(s.sides[proxy.Client], p.Cancels[0], b)
		case !f.Batch && len(p.Requests) == 1:
			to.sendNow(b).keep(p.Requests[0])
		default:
			to.sendNow(b)
		}
	}
	for _, mc := range p.More {
		b := getBuf()
		b.b = append(b.b, mc.Notice...)
		s.sendNotice(s.sides[proxy.Client], mc.Call, b)
	}
}

// Cancel cancels c, a request of the client's, on its behalf, as from
// source for reason (its stream closed), if it is still in flight:
// proxy.Session.Cancel. It reports whether c was in flight.
func (s *Session) Cancel(c *proxy.Call, source proxy.Source, reason string) bool {
	return s.core.Cancel(c, source, reason, nil)
}

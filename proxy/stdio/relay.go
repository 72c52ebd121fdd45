package stdio

import (
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// side is one peer as the stdio relay sees it.
type side struct {
	peer proxy.Peer
	out  *outbox // toward the other peer
	back *outbox // toward this peer, for the proxy's own answers
}

// handleFrame parses one frame from a peer and forwards, rewrites or drops
// each message in it. It takes ownership of b.
func (s *Session) handleFrame(from *side, f *framing.Frame, b *buf) {
	if from.peer == proxy.Client { // the governor's actions and CancelAll see tickets as the relay left them
		s.clientMu.Lock()
		defer s.clientMu.Unlock()
	}
	if err := f.Parse(b.b); err != nil {
		s.reply(from, s.t.Invalid(from.peer, err, b.b))
		putBuf(b)
		return
	}
	if f.Batch {
		s.handleBatch(from, f, b)
		return
	}
	o := s.t.Decide(from.peer, &f.Msgs[0])
	s.reply(from, o.Reply)
	if o.Verdict != proxy.Forward {
		putBuf(b)
		return
	}
	if o.Rewritten != nil {
		b.b = append(b.b[:0], o.Rewritten...)
	}
	switch {
	case o.Cancelled != nil:
		s.sendCancel(from, o.Cancelled, b)
	case o.Hold:
		s.held[o.Request] = b
	case o.Request != nil:
		// Only the issuer's relay goroutine, this one, reads the ticket:
		// cancels come from the same peer as their request.
		from.out.sendDeferred(b).keep(o.Request)
	default:
		from.out.sendDeferred(b)
	}
}

// sendCancel passes on an accepted cancel without letting it wait behind
// other frames: if its request is still queued in the proxy, the request is
// withdrawn and neither is ever sent; if the request has been written, the
// cancel goes ahead of everything queued; otherwise (the request went in a
// batch that is still queued) it keeps its place behind the request.
func (s *Session) sendCancel(from *side, c *proxy.Call, b *buf) {
	held := s.held[c]
	switch {
	case held != nil: // held by the governor: never sent
		delete(s.held, c)
		putBuf(held)
		putBuf(b)
		s.t.Withdraw(from.peer, c)
	case ticketOf(c).withdraw():
		putBuf(b)
		s.t.Withdraw(from.peer, c)
	case ticketOf(c).written():
		s.timeNotice(from, c, b)
		from.out.sendUrgent(b)
	default:
		s.timeNotice(from, c, b)
		from.out.sendDeferred(b)
	}
}

// timeNotice has the notification of a client's cancel of c report, once
// written whole to the server, how long after now that was, and note it
// on c's span.
func (s *Session) timeNotice(from *side, c *proxy.Call, b *buf) {
	f := s.opts.OnNotified
	if from.peer != proxy.Client || (f == nil && !c.Traced()) {
		return
	}
	start := time.Now()
	b.done = func() {
		if f != nil {
			f(time.Since(start))
		}
		c.Span().Event(proxy.EventCancelForwarded)
	}
}

// handleBatch handles a JSON array of messages (protocol 2025-03-26). When
// every element passes unchanged the original bytes are forwarded; otherwise
// the batch is rebuilt from the elements that pass.
func (s *Session) handleBatch(from *side, f *framing.Frame, b *buf) {
	out := getBuf()
	out.b = append(out.b, '[')
	kept, same := 0, true
	for i := range f.Msgs {
		m := &f.Msgs[i]
		var o proxy.Outcome
		if f.Errs[i] != nil {
			o = proxy.Outcome{Verdict: proxy.Drop, Reply: s.t.Invalid(from.peer, f.Errs[i], m.Raw)}
		} else {
			o = s.t.Decide(from.peer, m)
		}
		s.reply(from, o.Reply)
		if o.Verdict != proxy.Forward {
			same = false
			continue
		}
		if kept > 0 {
			out.b = append(out.b, ',')
		}
		kept++
		if o.Rewritten != nil {
			same = false
			out.b = append(out.b, o.Rewritten...)
		} else {
			out.b = append(out.b, m.Raw...)
		}
	}
	out.b = append(out.b, ']')
	switch {
	case same:
		putBuf(out)
		from.out.sendDeferred(b)
	case kept > 0:
		putBuf(b)
		from.out.sendDeferred(out)
	default:
		putBuf(b)
		putBuf(out)
	}
}

// tooLarge answers for a frame over the size limit.
func (s *Session) tooLarge(from *side, tl *framing.FrameTooLargeError) {
	toSender, toOther := s.t.TooLarge(from.peer, tl)
	s.reply(from, toSender)
	if toOther != nil {
		s.reply(s.sides[from.peer.Other()], toOther)
	}
}

// reply sends the proxy's own message, if any, to a peer.
func (s *Session) reply(to *side, msg []byte) {
	if msg == nil {
		return
	}
	b := getBuf()
	b.b = append(b.b, msg...)
	to.back.send(b)
}

// Expire implements proxy.Actions: the call is cancelled on the server as a
// client cancel would be, and the client gets reply.
func (s *Session) Expire(c *proxy.Call, reason string, reply []byte) {
	s.clientMu.Lock()
	defer s.clientMu.Unlock()
	cancel := s.t.CancelCall(c, proxy.SourceDeadline, reason)
	if cancel == nil {
		return // answered or cancelled meanwhile
	}
	b := getBuf()
	b.b = append(b.b, cancel...)
	s.sendCancel(s.sides[proxy.Client], c, b)
	s.sides[proxy.Client].out.flush()
	s.reply(s.sides[proxy.Client], reply)
}

// Dispatch implements proxy.Actions: a held request is sent now.
func (s *Session) Dispatch(c *proxy.Call) {
	s.clientMu.Lock()
	defer s.clientMu.Unlock()
	if b := s.held[c]; b != nil {
		delete(s.held, c)
		s.sides[proxy.Client].out.send(b).keep(c)
	}
}

// SendOwn implements proxy.Actions.
func (s *Session) SendOwn(method string, params []byte, onAnswer func(*framing.Message)) {
	b := getBuf()
	b.b = append(b.b, s.t.OwnRequest(method, params, onAnswer)...)
	s.sides[proxy.Client].out.send(b)
}

// Restart implements proxy.Actions.
func (s *Session) Restart(reason string) bool {
	return s.opts.OnRestart != nil && s.opts.OnRestart(reason)
}

// After implements proxy.Actions: f runs between two client frames.
func (s *Session) After(f func()) {
	s.clientMu.Lock()
	defer s.clientMu.Unlock()
	f()
}

// OwnRequest registers a request of the proxy's own to the server and
// returns its frame, for the caller to write (proxy.Tracker.OwnRequest).
func (s *Session) OwnRequest(method string, params []byte, onAnswer func(*framing.Message)) []byte {
	return s.t.OwnRequest(method, params, onAnswer)
}

// CancelAll cancels every request of the client still in flight, on the
// server as a client cancel would (so the governor runs their hooks and
// audits them, with source), and answers each for the client with a
// CodeServerGone error saying why: what a shutdown does before it stops the
// server. It returns how many it cancelled.
func (s *Session) CancelAll(source proxy.Source, why string) int {
	s.clientMu.Lock()
	defer s.clientMu.Unlock()
	from := s.sides[proxy.Client]
	if from == nil {
		return 0 // Run has not started
	}
	cs := s.t.CancelInFlight(source, why)
	for _, c := range cs {
		b := getBuf()
		b.b = append(b.b, c.Notice...)
		s.sendCancel(from, c.Call, b)
		s.reply(from, s.t.ErrorReply(c.Call.ID(), proxy.CodeServerGone, why))
	}
	from.out.flush()
	return len(cs)
}

// Restarted tells the session that its server was replaced (an
// escalation): the client's requests still in flight are answered with an
// error saying why, and the old server's own requests are forgotten.
func (s *Session) Restarted(why string) {
	s.clientMu.Lock()
	defer s.clientMu.Unlock()
	for _, r := range s.t.FailInFlight(why) {
		s.reply(s.sides[proxy.Client], r)
	}
	s.t.ForgetServerRequests()
}

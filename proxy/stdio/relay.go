package stdio

import (
	"bytes"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/wire"
)

// side is one peer as the stdio relay sees it.
type side struct {
	peer proxy.Peer
	out  *wire.Outbox // toward the other peer
	back *wire.Outbox // toward this peer, for the proxy's own answers
}

// handleFrame parses one frame from a peer and forwards, rewrites or drops
// each message in it. It takes ownership of b.
func (s *Session) handleFrame(from *side, f *framing.Frame, b *wire.Buf) {
	if from.peer == proxy.Client { // the governor's actions and CancelAll see tickets as the relay left them
		s.core.Lock()
		defer s.core.Unlock()
	}
	if err := f.Parse(b.B); err != nil {
		s.reply(from, s.t.Invalid(from.peer, err, b.B))
		wire.PutBuf(b)
		return
	}
	s.decideLocked(from, f, b)
}

// decideLocked is handleFrame once f is parsed from b's bytes, with the
// core's lock held for a client's frame.
func (s *Session) decideLocked(from *side, f *framing.Frame, b *wire.Buf) {
	if f.Batch {
		s.handleBatch(from, f, b)
		return
	}
	o, then := s.core.DecideThen(from.peer, &f.Msgs[0], proxy.TraceContext{})
	if o.Cancelled != nil && !wire.TicketOf(o.Cancelled).Written() {
		then() // it may withdraw its request: the governor hears of the cancel first
		then = func() {}
	}
	s.reply(from, o.Reply)
	s.keepMessage(from, o, b, &f.Msgs[0])
	s.carry(from, o, b, false)
	then() // the cancel is on its way: the governor and the feed hear of it now
}

// carry carries out what the core decided of one message from a peer,
// whose bytes b holds (its reply is the caller's). now says the frame is a
// front's (Submit): queued without waiting for room, and sent at once.
func (s *Session) carry(from *side, o proxy.Outcome, b *wire.Buf, now bool) {
	if o.Verdict != proxy.Forward {
		wire.PutBuf(b)
		return
	}
	if o.Rewritten != nil {
		b.B = append(b.B[:0], o.Rewritten...)
	}
	b.About, b.Last = o.For, o.Last
	for _, mc := range o.More { // requests in flight under the cancel's id (AllowSharedIDs): each is told
		nb := wire.GetBuf()
		nb.B = append(nb.B, mc.Notice...)
		s.sendNotice(from, mc.Call, nb)
	}
	switch {
	case o.Cancelled != nil:
		s.sendNotice(from, o.Cancelled, b)
	case o.Hold:
		b.Opens = o.Request
		s.core.Hold(o.Request, b)
	case o.Request != nil:
		b.Opens = o.Request
		// Only the issuer's side reads the ticket, under the session's
		// lock: cancels come from the same peer as their request.
		from.out.SendAs(b, now).Keep(o.Request)
	default:
		from.out.SendAs(b, now)
	}
}

// sendNotice passes on an accepted cancel of c, a request that is not held
// (Session.Decide withdrew it if it was), without letting it wait behind
// other frames: if its request is still queued in the proxy, the request is
// withdrawn and neither is ever sent; if the request has been written, the
// cancel goes ahead of everything queued; otherwise (the request went in a
// batch that is still queued) it keeps its place behind the request.
func (s *Session) sendNotice(from *side, c *proxy.Call, b *wire.Buf) {
	if from.peer == proxy.Client {
		b.Cancels, b.HasMsg = c, false
	}
	switch {
	case wire.TicketOf(c).Withdraw():
		wire.PutBuf(b)
		s.t.Withdraw(from.peer, c)
	case wire.TicketOf(c).Written():
		s.timeNotice(from, c, b)
		from.out.SendUrgent(b)
	default:
		s.timeNotice(from, c, b)
		from.out.SendDeferred(b)
	}
}

// keepMessage keeps m, the message b holds, with b, for a server that
// takes messages (Sender) and so need not parse it again, unless the core
// rewrote it. Its spans then index b's bytes, which m's equal.
func (s *Session) keepMessage(from *side, o proxy.Outcome, b *wire.Buf, m *framing.Message) {
	if from.out.TakesMessages() && o.Verdict == proxy.Forward && o.Rewritten == nil && bytes.Equal(m.Raw, b.B) {
		b.Msg, b.HasMsg = *m, true
		b.Msg.Raw = b.B
	}
}

// timeNotice has the notification of a client's cancel of c report, once
// written whole to the server, how long after now that was, and note it
// on c's span.
func (s *Session) timeNotice(from *side, c *proxy.Call, b *wire.Buf) {
	f := s.opts.OnNotified
	if from.peer != proxy.Client || (f == nil && !c.Traced()) {
		return
	}
	start := time.Now()
	b.Done = func() {
		if f != nil {
			f(time.Since(start))
		}
		c.Span().Event(proxy.EventCancelForwarded)
	}
}

// handleBatch handles a JSON array of messages (protocol 2025-03-26), as
// its session's core decides it (proxy.Session.DecideFrame): when every
// element passes unchanged the original bytes are forwarded; otherwise the
// batch is rebuilt from the elements that pass. A request in a batch is
// never held: it goes with the batch.
func (s *Session) handleBatch(from *side, f *framing.Frame, b *wire.Buf) {
	if from.peer == proxy.Server && s.opts.Deliver != nil {
		s.splitBatch(from, f, b)
		return
	}
	p := s.core.DecideFrame(from.peer, f, proxy.TraceContext{}, nil)
	for _, r := range p.Replies {
		s.reply(from, r)
	}
	switch {
	case p.Same:
		from.out.SendDeferred(b)
	case p.Data != nil:
		b.B = append(b.B[:0], p.Data...) // p.Data is a new array: a rebuilt batch aliases nothing
		from.out.SendDeferred(b)
	default:
		wire.PutBuf(b)
	}
}

// splitBatch passes on a batch of the server's as the core decided each
// message of it, saying which requests it is about (Options.Deliver): the
// batch goes as about its first such message, and an empty frame follows
// for each other request it ends. It takes ownership of b.
func (s *Session) splitBatch(from *side, f *framing.Frame, b *wire.Buf) {
	var kept [][]byte
	var ends []*wire.Buf
	b.About = nil
	for i := range f.Msgs {
		m := &f.Msgs[i]
		if f.Errs[i] != nil {
			s.t.Invalid(from.peer, f.Errs[i], m.Raw)
			continue
		}
		o := s.core.Decide(from.peer, m, proxy.TraceContext{})
		s.reply(from, o.Reply)
		if o.Verdict != proxy.Forward {
			continue
		}
		raw := m.Raw
		if o.Rewritten != nil {
			raw = o.Rewritten
		}
		kept = append(kept, raw)
		switch {
		case o.For == nil:
		case b.About == nil:
			b.About, b.Last = o.For, o.Last
		case o.Last:
			end := wire.GetBuf()
			end.About, end.Last = o.For, true
			ends = append(ends, end)
		}
	}
	if len(kept) == 0 {
		wire.PutBuf(b)
		return
	}
	b.B = append(b.B[:0], proxy.JoinFrame(kept, true)...)
	from.out.SendDeferred(b)
	for _, end := range ends {
		from.out.SendDeferred(end)
	}
}

// tooLarge answers for a frame over the size limit.
func (s *Session) tooLarge(from *side, tl *framing.FrameTooLargeError) {
	toSender, toOther, about := s.t.TooLarge(from.peer, tl)
	s.reply(from, toSender)
	if toOther != nil {
		s.replyAbout(s.sides[from.peer.Other()], toOther, about, true)
	}
}

// reply sends the proxy's own message, if any, to a peer.
func (s *Session) reply(to *side, msg []byte) { s.replyAbout(to, msg, nil, false) }

// replyAbout sends the proxy's own message, if any, to a peer: about the
// request about, and that request's last when last (see Deliver).
func (s *Session) replyAbout(to *side, msg []byte, about *proxy.Call, last bool) {
	if msg == nil {
		return
	}
	b := wire.GetBuf()
	b.B = append(b.B, msg...)
	b.About, b.Last = about, last
	to.back.Send(b)
}

// carrier carries out, on the session's outboxes, what its proxy.Session
// decides with no frame in hand; the core's lock is held.
type carrier struct{ s *Session }

// Dispatch implements proxy.Carrier: a held request is sent now.
func (k carrier) Dispatch(c *proxy.Call, held any) {
	k.s.sides[proxy.Client].out.Send(held.(*wire.Buf)).Keep(c)
}

// Withdrawn implements proxy.Carrier.
func (k carrier) Withdrawn(c *proxy.Call, held any, reply []byte) {
	wire.PutBuf(held.(*wire.Buf))
	k.s.replyAbout(k.s.sides[proxy.Client], reply, c, true)
}

// Cancel implements proxy.Carrier: the cancel goes ahead of what is
// queued for the server (or withdraws its request, still queued), and the
// client gets reply.
func (k carrier) Cancel(c *proxy.Call, notice, reply []byte) {
	from := k.s.sides[proxy.Client]
	b := wire.GetBuf()
	b.B = append(b.B, notice...)
	k.s.sendNotice(from, c, b)
	from.out.Flush()
	k.s.replyAbout(from, reply, c, true)
}

// Notify implements proxy.Carrier: the client gets frame.
func (k carrier) Notify(c *proxy.Call, _ any, frame []byte) {
	k.s.replyAbout(k.s.sides[proxy.Client], frame, c, false)
}

// CancelOwn implements proxy.Carrier: the cancel of the proxy's own
// request goes to the server, after it (one queue carries both).
func (k carrier) CancelOwn(c *proxy.Call, notice []byte) {
	b := wire.GetBuf()
	b.B = append(b.B, notice...)
	b.Cancels = c
	k.s.sides[proxy.Client].out.Send(b)
}

// SendOwn implements proxy.Carrier.
func (k carrier) SendOwn(c *proxy.Call, frame []byte) {
	b := wire.GetBuf()
	b.B = append(b.B, frame...)
	b.Opens = c
	k.s.sides[proxy.Client].out.Send(b)
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
	return s.core.CancelAll(source, why, func(id framing.ID) []byte {
		return s.t.ErrorReply(id, proxy.CodeServerGone, why)
	})
}

// Restarted tells the session that its server was replaced (an
// escalation): the client's requests still in flight are answered with an
// error saying why, and the old server's own requests are forgotten.
func (s *Session) Restarted(why string) {
	s.core.Lock()
	defer s.core.Unlock()
	for _, r := range s.t.FailInFlight(why) {
		s.replyAbout(s.sides[proxy.Client], r.Frame, r.To, true)
	}
	s.t.ForgetServerRequests()
}

package proxy

import (
	"errors"
	"fmt"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// proxyName goes in the data of every error the proxy writes itself, so that
// no one mistakes it for the server's.
const proxyName = "mcp-cancel-proxy"

// outcome is what handle decided for one message.
type outcome struct {
	v         Verdict
	rewritten *buf  // replaces the message's bytes when forwarded, if set
	req       *call // a request that is being forwarded
	cancelled *call // the request an accepted cancel names
}

// handleFrame parses one frame from a peer and forwards, rewrites or drops
// each message in it. It takes ownership of b.
func (s *Session) handleFrame(from *side, f *framing.Frame, b *buf) {
	if err := f.Parse(b.b); err != nil {
		s.badFrame(from, err, b.b)
		putBuf(b)
		return
	}
	if f.Batch {
		s.handleBatch(from, f, b)
		return
	}
	o := s.handle(from, &f.Msgs[0])
	if o.v != Forward {
		putBuf(b)
		return
	}
	if o.rewritten != nil {
		putBuf(b)
		b = o.rewritten
	}
	switch {
	case o.cancelled != nil:
		s.sendCancel(from, o.cancelled, b)
	case o.req != nil:
		// Only the issuer's relay goroutine, this one, reads the ticket:
		// cancels come from the same peer as their request.
		o.req.ticket = from.out.sendDeferred(b)
	default:
		from.out.sendDeferred(b)
	}
}

// sendCancel passes on an accepted cancel without letting it wait behind
// other frames: if its request is still queued in the proxy, the request is
// withdrawn and neither is ever sent; if the request has been written, the
// cancel goes ahead of everything queued; otherwise (the request went in a
// batch that is still queued) it keeps its place behind the request.
func (s *Session) sendCancel(from *side, c *call, b *buf) {
	switch {
	case c.ticket.withdraw():
		putBuf(b)
		from.issued.forget(c)
		s.stats.withdrawn.Add(1)
		s.stats.forwarded.Add(-1) // counted when it was queued; it never left
		s.note(from, from.issued.dir, ActWithdrawn, framing.KindRequest, c.method, c.id,
			"cancelled before it was sent: neither the request nor the cancel reaches the "+s.other(from).name, zapcore.InfoLevel)
	case c.ticket.written():
		from.out.sendUrgent(b)
	default:
		from.out.sendDeferred(b)
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
		o := outcome{v: Drop}
		if f.Errs[i] != nil {
			s.badMessage(from, m, f.Errs[i])
		} else {
			o = s.handle(from, m)
		}
		if o.v != Forward {
			same = false
			continue
		}
		if kept > 0 {
			out.b = append(out.b, ',')
		}
		kept++
		if o.rewritten != nil {
			same = false
			out.b = append(out.b, o.rewritten.b...)
			putBuf(o.rewritten)
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

// handle decides one message. A non-nil rewritten buffer replaces the
// message's bytes when it is forwarded.
func (s *Session) handle(from *side, m *framing.Message) outcome {
	switch m.Kind {
	case framing.KindRequest:
		return s.request(from, m)
	case framing.KindResponse:
		return s.response(from, m)
	}
	switch m.Method {
	case framing.MethodCancelled:
		return s.cancel(from, m)
	case framing.MethodProgress:
		return s.progress(from, m)
	}
	s.forwarded(from, m.Kind, m.Method, m.ID)
	return outcome{}
}

func (s *Session) request(from *side, m *framing.Message) outcome {
	c, v := from.issued.begin(m)
	if v == Drop {
		s.dropped(from, from.issued.dir, m, m.ID, reasonDuplicateID, zapcore.WarnLevel)
		s.replyError(from, m.ID, framing.CodeInvalidRequest, "Invalid Request: "+reasonDuplicateID)
		return outcome{v: Drop}
	}
	s.forwarded(from, m.Kind, m.Method, m.ID)
	o := outcome{req: c}
	if c.aliased() || c.tokenAliased() {
		from.log.Debug("request id or progress token reused while a cancelled request may still use it; renamed upstream",
			zap.Stringer("id", c.id), zap.Stringer("upstream_id", c.upID),
			zap.Stringer("token", c.token), zap.Stringer("upstream_token", c.upToken))
		o.rewritten = spliceRequest(m, c)
	}
	return o
}

// spliceRequest returns a request's bytes with its id and progress token
// replaced by their receiver-side aliases, whichever are aliased.
func spliceRequest(m *framing.Message, c *call) *buf {
	type edit struct {
		span framing.Span
		id   framing.ID
	}
	edits := make([]edit, 0, 2)
	if c.aliased() {
		edits = append(edits, edit{m.IDSpan, c.upID})
	}
	if c.tokenAliased() {
		edits = append(edits, edit{m.TokenSpan, c.upToken})
	}
	if len(edits) == 2 && edits[1].span.Start < edits[0].span.Start {
		edits[0], edits[1] = edits[1], edits[0]
	}
	b := getBuf()
	at := 0
	for _, e := range edits {
		b.b = append(b.b, m.Raw[at:e.span.Start]...)
		b.b = e.id.AppendJSON(b.b)
		at = e.span.End
	}
	b.b = append(b.b, m.Raw[at:]...)
	return b
}

func (s *Session) response(from *side, m *framing.Message) outcome {
	if !m.ID.IsValid() { // an error about a message the peer could not read
		s.forwarded(from, m.Kind, m.Method, m.ID)
		return outcome{}
	}
	c, v := from.answers.complete(m.ID)
	switch v {
	case Drop:
		s.dropped(from, from.answers.dir, m, m.ID, reasonUnknownReply, zapcore.WarnLevel)
		return outcome{v: Drop}
	case Suppress:
		s.stats.responsesSuppressed.Add(1)
		s.note(from, from.answers.dir, ActSuppressed, m.Kind, c.method, c.id, "late response to a cancelled request", zapcore.DebugLevel)
		return outcome{v: Suppress}
	}
	s.forwarded(from, m.Kind, c.method, c.id)
	if c.aliased() {
		return outcome{rewritten: splice(m, m.IDSpan, c.id)}
	}
	return outcome{}
}

func (s *Session) cancel(from *side, m *framing.Message) outcome {
	if !m.RequestID.IsValid() {
		s.stats.cancelsDropped.Add(1)
		s.note(from, from.issued.dir, ActCancelDropped, m.Kind, m.Method, m.RequestID, reasonNoRequestID, zapcore.DebugLevel)
		return outcome{v: Drop}
	}
	c, reason := from.issued.cancel(m.RequestID)
	if reason != "" {
		s.stats.cancelsDropped.Add(1)
		s.note(from, from.issued.dir, ActCancelDropped, m.Kind, m.Method, m.RequestID, reason, zapcore.DebugLevel)
		return outcome{v: Drop}
	}
	s.stats.cancelsForwarded.Add(1)
	s.note(from, from.issued.dir, ActCancelAccepted, m.Kind, c.method, c.id, m.Reason, zapcore.InfoLevel)
	o := outcome{cancelled: c}
	if c.aliased() {
		o.rewritten = splice(m, m.RequestIDSpan, c.upID)
	}
	return o
}

func (s *Session) progress(from *side, m *framing.Message) outcome {
	if !m.Token.IsValid() {
		s.forwarded(from, m.Kind, m.Method, m.Token)
		return outcome{}
	}
	c, v := from.answers.progress(m.Token)
	if v == Suppress {
		s.stats.progressSuppressed.Add(1)
		s.note(from, from.answers.dir, ActSuppressed, m.Kind, m.Method, c.id, "progress for a cancelled request", zapcore.DebugLevel)
		return outcome{v: Suppress}
	}
	s.forwarded(from, m.Kind, m.Method, m.Token)
	if c != nil && c.tokenAliased() {
		return outcome{rewritten: splice(m, m.TokenSpan, c.token)}
	}
	return outcome{}
}

// splice returns m's bytes with the id at span replaced.
func splice(m *framing.Message, span framing.Span, id framing.ID) *buf {
	b := getBuf()
	b.b = framing.Splice(b.b, m.Raw, span, id)
	return b
}

// badFrame handles a frame that failed to parse: -32700 (or -32600 for valid
// JSON that is no JSON-RPC message) to a client; a log line for a server.
func (s *Session) badFrame(from *side, err error, raw []byte) {
	s.stats.dropped.Add(1)
	code, msg := framing.CodeParseError, "Parse error"
	var ie *framing.InvalidError
	if errors.As(err, &ie) {
		code, msg = framing.CodeInvalidRequest, "Invalid Request"
	}
	from.log.Warn("malformed message dropped", zap.Error(err), zap.ByteString("head", head(raw)))
	s.emit(from, ActDropped, framing.KindInvalid, "", framing.ID{}, err.Error())
	if from == s.client {
		s.replyError(from, framing.ID{}, code, msg+": "+err.Error())
	}
}

// badMessage handles an invalid element of a batch.
func (s *Session) badMessage(from *side, m *framing.Message, err error) {
	s.stats.dropped.Add(1)
	from.log.Warn("invalid message in batch dropped", zap.Error(err), zap.ByteString("head", head(m.Raw)))
	s.emit(from, ActDropped, framing.KindInvalid, "", framing.ID{}, err.Error())
	if from == s.client {
		s.replyError(from, framing.ID{}, framing.CodeInvalidRequest, "Invalid Request: "+err.Error())
	}
}

// tooLarge answers for a frame over the size limit, which was skipped: the
// request it held is refused, and a response it held becomes an error for
// the request's issuer, so that nobody waits for it forever.
func (s *Session) tooLarge(from *side, tl *framing.FrameTooLargeError) {
	s.stats.dropped.Add(1)
	id, isResponse, ok := framing.PeekID(tl.Head)
	from.log.Error("frame over the size limit dropped", zap.Int64("size", tl.Size), zap.Int("limit", tl.Limit),
		zap.Stringer("id", id), zap.ByteString("head", head(tl.Head)))
	s.emit(from, ActDropped, framing.KindInvalid, "", id, tl.Error())
	switch {
	case ok && isResponse:
		if c, v := from.answers.complete(id); v == Forward {
			// The peer's answer is lost: tell the issuer rather than let it wait.
			s.replyError(s.other(from), c.id, framing.CodeInternalError,
				fmt.Sprintf("Internal error: the %s's response was dropped: %v", from.name, tl))
		}
	case ok:
		s.replyError(from, id, framing.CodeInvalidRequest, "Invalid Request: "+tl.Error())
	case from == s.client:
		s.replyError(from, framing.ID{}, framing.CodeInvalidRequest, "Invalid Request: "+tl.Error())
	}
}

func (s *Session) other(p *side) *side {
	if p == s.client {
		return s.server
	}
	return s.client
}

// failInFlight answers every client request still in flight with
// CodeServerGone.
func (s *Session) failInFlight(why string) {
	for _, c := range s.c2s.failAll() {
		s.log.Warn("answering request in flight: server gone", zap.Stringer("id", c.id), zap.String("method", c.method))
		s.replyError(s.client, c.id, CodeServerGone, why)
	}
}

// replyError sends the proxy's own error response to a peer.
func (s *Session) replyError(to *side, id framing.ID, code int, msg string) {
	s.stats.proxyErrors.Add(1)
	b := getBuf()
	b.b = framing.AppendErrorResponse(b.b, id, framing.ErrorObject{Code: code, Message: msg,
		Data: map[string]string{"proxy": proxyName}})
	s.emit(&side{name: "proxy"}, ActReplied, framing.KindResponse, "", id, msg)
	to.back.send(b)
}

// forwarded counts a message passed on; method and id are the message's, or
// for a response those of the request it answers.
func (s *Session) forwarded(from *side, k framing.Kind, method string, id framing.ID) {
	s.stats.forwarded.Add(1)
	if s.opts.OnEvent != nil {
		s.emit(from, ActForwarded, k, method, id, "")
	}
}

func (s *Session) dropped(from *side, dir Direction, m *framing.Message, id framing.ID, why string, lvl zapcore.Level) {
	s.stats.dropped.Add(1)
	s.note(from, dir, ActDropped, m.Kind, m.Method, id, why, lvl)
}

// note logs a decision at lvl and reports it as an Event.
// dir is the direction of the request the message concerns.
func (s *Session) note(from *side, dir Direction, a Action, k framing.Kind, method string, id framing.ID, why string, lvl zapcore.Level) {
	if ce := from.log.Check(lvl, string(a)); ce != nil {
		ce.Write(zap.String("direction", dir.String()), zap.String("kind", k.String()),
			zap.String("method", method), zap.Stringer("id", id), zap.String("reason", why))
	}
	s.emit(from, a, k, method, id, why)
}

func (s *Session) emit(from *side, a Action, k framing.Kind, method string, id framing.ID, note string) {
	if s.opts.OnEvent != nil {
		s.opts.OnEvent(Event{Time: s.opts.Now(), From: from.name, Action: a, Kind: k, Method: method, ID: id, Note: note})
	}
}

// head returns the start of a frame for a log line.
func head(raw []byte) []byte {
	if len(raw) > 200 {
		return raw[:200]
	}
	return raw
}

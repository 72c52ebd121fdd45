package httpx

import (
	"bytes"
	"fmt"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/stream"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// joinedStream is the event stream a held re-issue's POST answers with
// once the call it joined (reissue: join) reports progress: the progress
// goes on it under the re-issue's token, then the call's answer. Should
// the re-issue be sent after all (the call it joined ended without the
// server's answer), the POST goes upstream from here and its answer comes
// on the same stream.
type joinedStream struct {
	ev   *stream.Events
	st   *relayed          // the POST's, to which the request is attached
	from *fasthttp.Request // the client's POST, kept past its handler
	body []byte            // what the POST forwards
}

// end ends the stream with reply, if not nil; the request was never sent.
func (j *joinedStream) end(sess *session, reply []byte) {
	if reply != nil {
		j.ev.Send(reply, true)
	}
	j.ev.End()
	j.st.post().Headed() // never sent
	sess.detach(j.st)
}

// streamJoined waits for the single request of a POST that the governor
// holds, where it may be a re-issue joined to a running call (the session
// defers cancels): once the call has reported progress, the POST answers
// with an event stream (joinedStream), and streamJoined reports true; so
// it does when the call's answer came right after its progress, which
// then go on the stream together. Otherwise (no progress came before the
// request was dispatched or answered) the POST goes on as any held one
// (admit).
func (rl relay) streamJoined(ctx *fasthttp.RequestCtx, sess *session, st *relayed, d *decided) bool {
	if len(d.Held) != 1 || len(d.Requests) != 1 || !sess.core.DefersCancels() {
		return false
	}
	h := d.Held[0].Handle.(*hold)
	byClose := sess.protocolVersion().CancelsByClose()
	rl.waitJoined(ctx, sess, d, h, byClose)
	sess.core.Lock()
	over := isClosed(h.ch)
	if len(h.notes) == 0 || over && !h.withdrawn { // no progress; or sent after all, to have its own
		sess.core.Unlock()
		return false
	}
	j := &joinedStream{ev: stream.NewEvents(rl.s.clock, 1), st: st}
	for _, n := range h.notes {
		j.ev.Send(n, false)
	}
	h.notes = nil
	if over { // answered: the answer follows its progress
		j.end(sess, h.reply)
	} else {
		j.from, j.body = new(fasthttp.Request), bytes.Clone(d.Data)
		ctx.Request.CopyTo(j.from)
		h.joined = j
	}
	sess.core.Unlock()
	if byClose {
		// Closing the stream is the re-issue's cancel: withdrawn while
		// held, and, once sent after all, its upstream stream closed.
		j.ev.OnAbort = func() {
			rl.heldClientGone(sess, d)
			j.st.CloseWithError(errClientGone)
		}
	}
	sess.open.Add(1)
	stop := rl.s.closes.Watch(ctx.Conn(), j.ev.Abort)
	j.ev.StopWatch = func() {
		stop()
		sess.open.Add(-1)
		rl.requestDone(sess) // a request's own session: its governor, which the re-issue waits with, ends now
	}
	stream.Serve(ctx, j.ev)
	return true
}

// waitJoined waits until the held request of h is dispatched, answered or
// withdrawn, or the call it joined reports progress. In 2026-07-28 a
// client that closes the stream meanwhile withdraws it; in 2025 it frees a
// poll (watchHeld).
func (rl relay) waitJoined(ctx *fasthttp.RequestCtx, sess *session, d *decided, h *hold, byClose bool) {
	defer rl.watchHeld(ctx, sess, d, byClose)()
	select {
	case <-h.ch:
	case <-h.noted:
	}
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// forwardJoined sends the request of a joinedStream upstream (it was
// dispatched after all) and relays the answer, JSON or an event stream,
// onto the stream.
func (ob outbound) forwardJoined(sess *session, c *proxy.Call, j *joinedStream) {
	defer sess.detach(j.st)
	defer j.ev.End()
	req := fasthttp.AcquireRequest()
	ob.s.up.Build(req, upstream.Request{Body: j.body, From: j.from, Posting: j.st.post()})
	resp, err := ob.s.up.Send(req, 0)
	fasthttp.ReleaseRequest(req)
	j.st.post().Headed()
	fail := func(why string) {
		if reply := sess.t.Fail(c, proxy.CodeServerGone, why); reply != nil {
			j.ev.Send(reply, true)
		}
	}
	if err != nil {
		loss, why := upstream.PostLoss(err)
		if reply := (relay{ob.s}).lose(sess, c, loss, why); reply != nil {
			j.ev.Send(reply, true)
		}
		return
	}
	if status := resp.StatusCode(); status >= 500 {
		upstream.ReadHead(resp) // and releases it
		fail(fmt.Sprintf("the upstream MCP server failed with HTTP %d", status))
		return
	}
	defer fasthttp.ReleaseResponse(resp)
	if !j.st.SetBody(upstream.BodyOf(resp)) { // cancelled meanwhile
		return
	}
	ob.readAnswer(sess, resp, func(b []byte, event bool) {
		if event {
			j.ev.SendEvent(bytes.Clone(b), true) // b is the reader's buffer
		} else {
			j.ev.Send(b, true)
		}
	})
	cut := j.st.WasCut()
	j.st.CloseWithError(nil)
	if final := j.st.TakeFinal(); final != nil {
		j.ev.Send(final, true)
	} else if !cut {
		lost := proxy.Loss{Reason: proxy.ReasonLost, MayHaveRun: true}
		if reply := (relay{ob.s}).lose(sess, c, lost, errEndedUnanswered.Error()); reply != nil {
			j.ev.Send(reply, true) // nothing, if it was answered
		}
	}
}

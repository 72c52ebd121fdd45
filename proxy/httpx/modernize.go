package httpx

import (
	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// A client of the 2025 revisions can cancel a request of a stateless
// upstream only by closing the request's stream: a POSTed cancel names no
// session there, so it finds nothing. Servers take a closed stream as the
// cancel of a 2026-07-28 request (the go-sdk, for instance, only of such
// a request). So when a stateless upstream answers server/discover with
// 2026-07-28 among its versions, the backend sends the session's requests
// as 2026-07-28 ones: the protocol version, the client's info and
// capabilities in params._meta (SEP-2575), and the headers that mirror
// them. The client still speaks its revision; what it gets back is the
// same kind of answer.

// modernizeSessionless sends a request that a client of the 2025
// revisions POSTs without a session (its upstream, stateless, gave it
// none) as a 2026-07-28 one, when the upstream speaks that revision: the
// client's cancel cannot be matched without a session, and nobody can
// resume such a stream, so closing it is the only cancel there is, and
// only a 2026-07-28 request is cancelled by it (the go-sdk's stateless
// handler, for one). The session, the request's own, then takes the
// stream's close as the cancel too.
func (rl relay) modernizeSessionless(ctx *fasthttp.RequestCtx, sess *session, m *framing.Message, d *decided) {
	v := sess.protocolVersion()
	if rl.s.KeepRevision || v == "" || v.CancelsByClose() || sess.sessionID() != "" || !upstream.Modernizable(m.Method) || !(outbound{rl.s}).upstreamModern() {
		return
	}
	var f framing.Frame
	if f.Parse(d.Data) != nil || f.Batch {
		return
	}
	modern, err := upstream.Modernize(&f.Msgs[0], nil)
	if err != nil || f.Parse(modern) != nil {
		return
	}
	d.Data, d.upgraded = modern, true
	version := string(framing.RevisionStateless)
	upstream.MirrorHeaders(&ctx.Request, &f.Msgs[0], &version)
	ctx.Request.Header.Set(upstream.VersionHeader, version)
	sess.setVersion([]byte(version))
}

// upstreamModern reports whether the upstream speaks 2026-07-28, asking it
// once (again after a failure to ask).
func (ob outbound) upstreamModern() bool {
	m := &ob.s.modern
	if m.done.Load() {
		return m.yes
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.done.Load() {
		yes, err := ob.s.endpoint.SpeaksModern(ob.s.log)
		if err == nil {
			m.yes = yes
			m.done.Store(true)
		}
		if yes {
			ob.s.log.Info("stateless upstream speaks protocol 2026-07-28: requests of 2025 clients without a session are sent as such, so that a closed stream cancels them", events.Mark(events.UpstreamStateless))
		}
	}
	return m.yes
}

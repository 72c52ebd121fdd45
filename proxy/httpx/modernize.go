package httpx

import (
	"strings"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
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
	if rl.s.KeepRevision || v == "" || v.CancelsByClose() || sess.sessionID() != "" || !upstream.Modernizable(m.Method) || !rl.s.up.Modern(rl.s.log) {
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
	rl.mirrorParams(&ctx.Request, &f.Msgs[0])
	ctx.Request.Header.Set(upstream.VersionHeader, version)
	sess.setVersion([]byte(version))
}

// mirrorParams sets the Mcp-Param-* headers of an upgraded tools/call, m,
// from the tools/list the sidecar read: the upgraded tools/list answers
// its clients got (downgrade), or, with none read since the list went
// stale, its own read of it, first, with the call's client's headers (its
// credentials), as the relay sends the call with them.
func (rl relay) mirrorParams(req *fasthttp.Request, m *framing.Message) {
	if m.Method != "tools/call" || !m.ParamsSpan.Found() {
		return
	}
	s, tools := rl.s, rl.s.up.Tools()
	tools.ReadOnce(func() {
		s.up.ReadTools(upstream.ToolsRead{Tools: tools, Of: m, MaxBody: s.maxBody, From: req, Log: s.log})
	})
	tools.Mirror(m.Name(), m.Raw[m.ParamsSpan.Start:m.ParamsSpan.End], req.Header.Set)
}

// downgrade returns an upgraded request's answer (st's) in its client's
// revision's shape (upstream.Downgrade). An upgraded tools/list's answer
// first teaches the sidecar its tools' mirrored parameters, and loses the
// tools whose annotations are invalid, as a 2026-07-28 client must leave
// them out; an answer that refuses a call's headers (-32020) makes the
// sidecar read tools/list again before the next call.
func (rl relay) downgrade(st *relayed, data []byte) []byte {
	switch {
	case st.toolsList:
		tools := rl.s.up.Tools()
		kept, rejected := tools.Learn(data)
		upstream.WarnRejected(rl.s.log, tools.Unwarned(rejected))
		if kept != nil {
			data = kept
		}
	case upstream.RefusesHeaders(data):
		rl.s.up.Tools().Forget()
	}
	return upstream.Downgrade(data)
}

// retryMismatch sends an upgraded tools/call (data) once more when the
// upstream refused its headers (400, HeaderMismatch: its tools changed),
// after reading tools/list again, as a 2026-07-28 client does. It returns
// the response to relay: the second one, or the first, its body read and
// put back, when it was another answer (or the second could not be had).
func (rl relay) retryMismatch(ctx *fasthttp.RequestCtx, st *relayed, data []byte, resp *fasthttp.Response) *fasthttp.Response {
	var f framing.Frame
	if st.toolsList || f.Parse(data) != nil || f.Batch || !rl.s.up.Refused(resp, &f.Msgs[0]) {
		return resp
	}
	rl.s.log.Debug("the upstream refused a call's headers: tools/list is read again, and the call sent once more", zap.String("tool", f.Msgs[0].Name()))
	var stale []string // the first try's Mcp-Param-* headers
	for k := range ctx.Request.Header.All() {
		if len(k) > len(paramPrefix) && strings.EqualFold(string(k[:len(paramPrefix)]), paramPrefix) {
			stale = append(stale, string(k))
		}
	}
	for _, k := range stale {
		ctx.Request.Header.Del(k)
	}
	rl.mirrorParams(&ctx.Request, &f.Msgs[0])
	again, err := rl.s.up.Do(upstream.Request{Body: data, From: &ctx.Request}, 0)
	if err != nil {
		return resp
	}
	fasthttp.ReleaseResponse(resp)
	return again
}

// paramPrefix begins the name of each header that mirrors a tool's
// parameter.
const paramPrefix = "Mcp-Param-"

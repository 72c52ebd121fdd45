package httpx

import (
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
func (rl relay) modernizeSessionless(sess *session, m *framing.Message, d *decided) {
	v := sess.protocolVersion()
	if rl.s.KeepRevision || v == "" || v.CancelsByClose() || sess.sessionID() != "" || !upstream.Modernizable(m.Method) || !rl.s.up.Modern(rl.s.log) {
		return
	}
	up := new(framing.Frame)
	if up.Parse(d.Data) != nil || up.Batch {
		return
	}
	modern, err := upstream.Modernize(&up.Msgs[0], nil)
	if err != nil || up.Parse(modern) != nil {
		return
	}
	d.Data, d.upgraded = modern, &up.Msgs[0] // its headers are mirrored as it is sent (upstream.Build)
	sess.setVersion([]byte(framing.RevisionStateless))
}

// downgrade returns an upgraded request's answer (st's) in its client's
// revision's shape (upstream.Downgrade). An upgraded tools/list's answer
// first teaches the sidecar its tools' mirrored parameters, and loses the
// tools whose annotations are invalid, as a 2026-07-28 client must leave
// them out; an answer that refuses a call's headers (-32020) makes the
// sidecar read tools/list again before the next call.
func (rl relay) downgrade(st *relayed, data []byte) []byte {
	rl.s.up.Heard(data)
	switch {
	case st.toolsList:
		data = rl.s.up.LearnTools(data, rl.s.log)
	case upstream.RefusesHeaders(data):
		rl.s.up.Tools().Forget()
	}
	return upstream.Downgrade(data)
}

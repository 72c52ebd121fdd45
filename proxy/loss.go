package proxy

import (
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// Reasons in data.reason of the proxy's -32000 for a request whose answer
// can no longer come from its upstream (Loss). Clients and users act on
// them: a spoiled answer came and was no answer; a lost one never came.
const (
	// ReasonSpoiled: the upstream answered the request's POST with JSON,
	// but not with its answer: the body was cut short, empty, not
	// JSON-RPC, over limits.max_frame_size, or the answer to another id.
	ReasonSpoiled = "upstream_spoiled"
	// ReasonLost: the answer never came: the upstream could not be
	// reached, dropped the connection after it read the request, broke or
	// ended the request's stream without the answer, or exited (a stdio
	// server).
	ReasonLost = "upstream_lost"
)

// Loss is why the proxy answers a request in its upstream's place, and
// whether the server may have run it: false only when nothing of the
// request reached it (keepalive.Unsent), so that a client may send it
// again without running it twice.
type Loss struct {
	Reason     string
	MayHaveRun bool
}

// lossData is the data of a Loss's error.
type lossData struct {
	Proxy      string `json:"proxy"`
	Reason     string `json:"reason"`
	MayHaveRun bool   `json:"may_have_run"`
}

// LossReply builds the proxy's -32000 for a request whose upstream spoiled
// or lost its answer: msg says what happened, data names the proxy, the
// reason and whether the server may have run the request.
func LossReply(id framing.ID, l Loss, msg string) []byte {
	return framing.AppendErrorResponse(nil, id, framing.ErrorObject{Code: CodeServerGone, Message: msg,
		Data: lossData{Proxy: proxyName, Reason: l.Reason, MayHaveRun: l.MayHaveRun}})
}

// FailLost is Fail for a request whose upstream spoiled or lost its
// answer: the error carries the Loss (LossReply). nil if the request was
// no longer in flight.
func (t *Tracker) FailLost(c *Call, l Loss, msg string) []byte {
	if !t.fail(c, CodeServerGone, msg) {
		return nil
	}
	t.replied(c.id, msg)
	return LossReply(c.id, l, msg)
}

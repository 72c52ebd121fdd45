package check

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// CancelPOST opens a session of its own with the Streamable HTTP server at
// rawURL, POSTs a cancel of an id the server never saw, and returns the
// line that says how the server answered it: a server should accept a
// late cancel (202) rather than answer it with an error status. protocol
// is the revision Run negotiated; in 2026-07-28 no cancel is POSTed (the
// stream's close is the cancel), and the line is skipped.
func CancelPOST(rawURL string, headers []upstream.Header, protocol framing.Revision, timeout time.Duration) Line {
	const check = "http-cancel-status"
	if protocol.CancelsByClose() {
		return Line{Check: check, Verdict: Skip, Says: "in 2026-07-28 a cancel is the close of its request's stream; none is POSTed"}
	}
	u, err := upstream.NewStreamableUpstream(rawURL, 0, 0)
	if err != nil {
		return Line{Check: check, Verdict: Skip, Says: err.Error()}
	}
	upstream.AddHeaders(u.Client, headers)
	init, _ := json.Marshal(request("check-http-init", framing.MethodInitialize, initParams(protocol)))
	resp, err := u.Do(upstream.Request{Body: init}, timeout)
	if err != nil {
		return Line{Check: check, Verdict: Skip, Says: "initialize: " + upstream.Brief(err)}
	}
	// Header names in any case: server-everything and FastMCP send
	// mcp-session-id (a case-sensitive look missed it, and the cancel
	// went without the session: HTTP 400, a false FAIL).
	session := string(upstream.Peek(resp.Header.All(), upstream.SessionHeader))
	upstream.ReadHead(resp) // and releases it
	post := func(body []byte) (int, error) {
		resp, err := u.Do(upstream.Request{Body: body, Session: session, Version: string(protocol)}, timeout)
		if err != nil {
			return 0, err
		}
		status := resp.StatusCode()
		upstream.ReadHead(resp)
		return status, nil
	}
	if _, err := post([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)); err != nil {
		return Line{Check: check, Verdict: Skip, Says: "notifications/initialized: " + upstream.Brief(err)}
	}
	status, err := post(cancel("check-never-sent"))
	if session != "" {
		if resp, err := u.Do(upstream.Request{Method: fasthttp.MethodDelete, Session: session, Version: string(protocol)}, timeout); err == nil {
			upstream.ReadHead(resp)
		}
	}
	switch {
	case err != nil:
		return Line{Check: check, Verdict: Skip, Says: "the cancel POST: " + upstream.Brief(err)}
	case status == fasthttp.StatusAccepted:
		return Line{Check: check, Verdict: Pass, Says: "a POSTed cancel of an id the server never saw: 202 Accepted"}
	case status >= 200 && status < 300:
		return Line{Check: check, Verdict: Pass, Says: fmt.Sprintf("a POSTed cancel of an id the server never saw: %d (the spec says 202)", status)}
	}
	return Line{Check: check, Verdict: Fail, Rank: "SHOULD", Proxy: "the proxy answers its clients' cancel POSTs with 202 itself",
		Says: fmt.Sprintf("a POSTed cancel of an id the server never saw got HTTP %d (a cancel SHOULD be ignored)", status)}
}

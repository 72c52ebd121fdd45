package httpx

import (
	"testing"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap/zaptest"
)

// TestWatchedCallSetsNoTimer: a 2026-07-28 call whose client's close is
// watched until the upstream's headers come (and a JSON answer) leaves
// nothing in the sidecar's queue of what waits, whose one timer would
// otherwise go off about every headDelay under a steady load, waking the
// process: the watch begins at once instead.
func TestWatchedCallSetsNoTimer(t *testing.T) {
	up := serveOn(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBodyString(`{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`)
	})
	sc := &Sidecar{Upstream: up, UpstreamTransport: TransportStreamable, Logger: zaptest.NewLogger(t)}
	h, err := sc.Handler()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Cleanup("the test ends") })
	front := serveOn(t, h)
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(front)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "echo")
	req.SetBodyString(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo",` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`)
	if err := (&fasthttp.Client{}).Do(req, resp); err != nil || resp.StatusCode() != fasthttp.StatusOK {
		t.Fatalf("the call: %v, status %d: %s", err, resp.StatusCode(), resp.Body())
	}
	if n := sc.soon.Waiting(); n != 0 {
		t.Errorf("%d functions wait in the sidecar's queue after a watched call, want none", n)
	}
}

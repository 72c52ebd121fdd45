package upstream_test

import (
	"fmt"
	"net"
	"net/url"
	"testing"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// BenchmarkBridgeCall: one tools/call at a time through the bridge (a
// stdio session over a Streamable HTTP server's session) to a fasthttp
// server that answers each with JSON at once: the cost of a call on the
// line path, the server's included.
func BenchmarkBridgeCall(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.Response.Header.Set("Mcp-Session-Id", "s1")
		id, isResponse, ok := framing.PeekID(ctx.PostBody())
		if !ok || isResponse {
			ctx.SetStatusCode(fasthttp.StatusAccepted)
			return
		}
		ctx.SetContentType("application/json")
		fmt.Fprintf(ctx, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","content":[{"type":"text","text":"ok"}]}}`, id.AppendJSON(nil))
	}}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Shutdown() }) // after the bridge has ended (cleanups run last first)
	u, _ := url.Parse("http://" + ln.Addr().String() + "/mcp")
	toBridge, lines := bridged(b, &upstream.StreamableUpstream{Endpoint: upstream.Endpoint{URL: u, Client: upstream.NewClient(0, 0)}}, zap.NewNop())
	ask := func(msg []byte) {
		if _, err := toBridge.Write(msg); err != nil {
			b.Fatal(err)
		}
		if _, err := lines.ReadSlice('\n'); err != nil {
			b.Fatal(err)
		}
	}
	ask([]byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}` + "\n"))
	call := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}` + "\n")
	b.ReportAllocs()
	for b.Loop() {
		ask(call)
	}
}

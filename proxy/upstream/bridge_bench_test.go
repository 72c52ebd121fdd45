package upstream_test

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// BenchmarkBridgeCall: one tools/call at a time through the bridge (a
// stdio session over a Streamable HTTP server's session) to a fasthttp
// server that answers each with JSON at once: the cost of a call on the
// line path, the server's included; with a short answer, and with one of
// 1 MiB (where what is done per byte shows: a parse, a copy).
func BenchmarkBridgeCall(b *testing.B) {
	b.Run("short", func(b *testing.B) { benchBridgeCall(b, "ok") })
	b.Run("1MiB", func(b *testing.B) { benchBridgeCall(b, strings.Repeat("x", 1<<20)) })
}

// benchBridgeCall is BenchmarkBridgeCall with answers whose text is text.
func benchBridgeCall(b *testing.B, text string) {
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
		fmt.Fprintf(ctx, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","content":[{"type":"text","text":%q}]}}`, id.AppendJSON(nil), text)
	}}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Shutdown() }) // after the bridge has ended (cleanups run last first)
	u, _ := url.Parse("http://" + ln.Addr().String() + "/mcp")
	toBridge, lines := bridged(b, &upstream.StreamableUpstream{Endpoint: upstream.Endpoint{URL: u, Client: upstream.NewClient(0, 0)}}, zap.NewNop())
	ask := func(msg []byte) {
		if _, err := toBridge.Write(msg); err != nil {
			b.Fatal(err)
		}
		for {
			_, err := lines.ReadSlice('\n')
			if err == bufio.ErrBufferFull { // a long line, read on
				continue
			}
			if err != nil {
				b.Fatal(err)
			}
			return
		}
	}
	ask([]byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}` + "\n"))
	call := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"}}}` + "\n")
	b.ReportAllocs()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		ask(call)
	}
}

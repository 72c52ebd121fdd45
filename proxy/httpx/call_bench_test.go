package httpx_test

import (
	"bytes"
	"net"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
)

// BenchmarkSidecarCall relays 2026-07-28 tools/call round trips, one at a
// time, through a sidecar with the default policy (as the binary runs it) to
// an upstream that answers at once with canned bytes, over loopback: its
// allocations per call are the sidecar's, the driver's and the upstream's,
// the last two being fixed. bench/httpload measures the sidecar against
// other proxies, and its CPU as a process of its own.
func BenchmarkSidecarCall(b *testing.B) {
	for _, mode := range []struct {
		name, contentType, body string
	}{
		{"json", "application/json", `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hello, load"}]}}`},
		{"sse", "text/event-stream", "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"hello, load\"}]}}\n\n"},
	} {
		b.Run(mode.name, func(b *testing.B) {
			up := serveFast(b, func(ctx *fasthttp.RequestCtx) {
				ctx.SetContentType(mode.contentType)
				ctx.SetBodyString(mode.body)
			}, nil)
			engine, err := policy.New(policy.Options{Policy: policy.Defaults(), Audit: policy.Audit{Path: "off"}})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { engine.Shutdown() })
			client, req := benchFront(b, &httpx.Sidecar{Upstream: up, UpstreamTransport: httpx.TransportStreamable,
				Governor: engine.Governor, Logger: zap.NewNop()})
			req.Header.Set("MCP-Protocol-Version", "2026-07-28")
			req.Header.Set("Mcp-Method", "tools/call")
			req.Header.Set("Mcp-Name", "echo")
			req.SetBodyString(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello, load"},` +
				`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`)
			callLoop(b, client, req)
		})
	}
}

// benchFront serves sc on a loopback port until the benchmark ends, and
// returns a client of it and a POST to its MCP endpoint, to complete.
func benchFront(b testing.TB, sc *httpx.Sidecar) (*fasthttp.HostClient, *fasthttp.Request) {
	h, err := sc.Handler()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { sc.Cleanup("the benchmark ends") })
	req := &fasthttp.Request{}
	req.SetRequestURI(serveFast(b, h, httpx.Listener))
	req.Header.SetMethod("POST")
	req.Header.SetContentType("application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	return &fasthttp.HostClient{Addr: string(req.URI().Host())}, req
}

// callLoop sends req for the benchmark's loop, each answer checked, and
// reports the goroutines started per call (the driver and the upstream
// start none: their connections' goroutines live on): each one is a
// wake-up of the scheduler's, which as a process of its own costs the
// sidecar more than the work it does.
func callLoop(b *testing.B, client *fasthttp.HostClient, req *fasthttp.Request) {
	var resp fasthttp.Response
	b.ReportAllocs()
	started, ran := goroutinesCreated(), goroutineRuns()
	defer func() {
		b.ReportMetric(float64(goroutinesCreated()-started)/float64(b.N), "goroutines/op")
		b.ReportMetric((goroutineRuns()-ran)/float64(b.N), "runs/op")
	}()
	for b.Loop() {
		if err := client.DoTimeout(req, &resp, 10*time.Second); err != nil {
			b.Fatal(err)
		}
		if resp.StatusCode() != 200 || !bytes.Contains(resp.Body(), []byte("hello, load")) {
			b.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
		}
	}
}

// goroutinesCreated returns how many goroutines the process has started.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// goroutineRuns estimates how many times a goroutine was made to run after
// it became runnable: each hand-off from one goroutine to another (and
// each wake-up from the network) is one. The runtime times one in 8 of
// each goroutine's runs (/sched/latencies:seconds); this is their count
// times 8, an estimate good to compare two runs of one driver by.
func goroutineRuns() float64 {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	var n uint64
	for _, c := range s[0].Value.Float64Histogram().Counts {
		n += c
	}
	return float64(n) * 8
}

// serveFast serves h on a loopback port until the benchmark ends, on the
// listener wrap makes if not nil, and returns its MCP URL.
func serveFast(b testing.TB, h fasthttp.RequestHandler, wrap func(net.Listener) net.Listener) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	if wrap != nil {
		ln = wrap(ln)
	}
	srv := &fasthttp.Server{Handler: h, CloseOnShutdown: true, IdleTimeout: time.Second}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String() + "/mcp"
}

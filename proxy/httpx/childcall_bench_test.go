package httpx_test

import (
	"bytes"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// BenchmarkChildCall relays tools/call round trips, one at a time, through
// the HTTP front to a stdio server in a session of its own (the line
// session every stdio child, HTTP+SSE upstream and old client goes
// through), the server being an in-process one that answers each request
// at once: its allocations per call are the front's and the line
// session's, the driver's and the server's being fixed.
func BenchmarkChildCall(b *testing.B) {
	client, req := benchFront(b, &httpx.Sidecar{Logger: zap.NewNop(),
		Children: &httpx.Children{Dial: upstream.DialFunc(func(*zap.Logger) (upstream.Conn, error) { return newAnswering().conn(), nil })}})
	var resp fasthttp.Response
	req.SetBodyString(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}`)
	if err := client.DoTimeout(req, &resp, 10*time.Second); err != nil || len(resp.Header.Peek("Mcp-Session-Id")) == 0 {
		b.Fatalf("initialize: %v %s", err, resp.Body())
	}
	req.Header.SetBytesV("Mcp-Session-Id", resp.Header.Peek("Mcp-Session-Id"))
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	req.SetBodyString(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello, load"}}}`)
	callLoop(b, client, req)
}

// answering is an in-process stdio server as a Backend: each request it
// is written gets, at once, a result quoting "hello, load".
type answering struct {
	in       *io.PipeReader
	inW      *io.PipeWriter
	stopOnce sync.Once
	exited   chan struct{}
}

func newAnswering() *answering {
	r, w := io.Pipe()
	return &answering{in: r, inW: w, exited: make(chan struct{})}
}

// conn returns the server as the Conn a Dialer returns.
func (a *answering) conn() upstream.Conn {
	return upstream.NewPipeConn(a.in, a, upstream.PipeOptions{Stop: a.Stop})
}

func (a *answering) Exited() <-chan struct{} { return a.exited }
func (a *answering) Stop()                   { a.stopOnce.Do(func() { a.inW.Close(); close(a.exited) }) }
func (a *answering) Close() error            { a.Stop(); return nil }

// Write answers each request among the lines of p.
func (a *answering) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(p, []byte("\n")) {
		var f framing.Frame
		if f.Parse(line) != nil || f.Batch || f.Msgs[0].Kind != framing.KindRequest {
			continue
		}
		out := append([]byte(`{"jsonrpc":"2.0","id":`), f.Msgs[0].Raw[f.Msgs[0].IDSpan.Start:f.Msgs[0].IDSpan.End]...)
		out = append(out, `,"result":{"content":[{"type":"text","text":"hello, load"}]}}`+"\n"...)
		if _, err := a.inW.Write(out); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

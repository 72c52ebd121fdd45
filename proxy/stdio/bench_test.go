package stdio_test

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
)

// BenchmarkRelay pushes request/response pairs through a real Session over
// in-memory pipes: the request is small, the response carries size bytes.
// The scripted peers do not allocate, so allocs/op is the proxy's, for two
// forwarded frames.
func BenchmarkRelay(b *testing.B) {
	for _, size := range []int{256, 4 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("response-%d", size), func(b *testing.B) { benchRelay(b, size, stdio.Options{MaxFrameSize: 4 << 20}) })
	}
}

// BenchmarkRelayWithPolicy is BenchmarkRelay with the default policy's
// governor, as the binary runs: no rule asks anything of the requests.
func BenchmarkRelayWithPolicy(b *testing.B) {
	e, err := policy.New(policy.Options{Policy: policy.Defaults(), Audit: policy.Audit{Path: "off"}})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Shutdown()
	for _, size := range []int{256, 4 << 10} {
		b.Run(fmt.Sprintf("response-%d", size), func(b *testing.B) {
			benchRelay(b, size, stdio.Options{MaxFrameSize: 4 << 20, Governor: e.Governor("bench")})
		})
	}
}

// The request's id sits at a fixed offset, 10 digits wide, so the scripted
// server can echo it without parsing.
const (
	reqHead = `{"jsonrpc":"2.0","id":`
	reqMid  = `,"method":"tools/call","params":{"name":"bench","_meta":{"progressToken":`
	reqTail = `}}}`
	idWidth = 10
)

func benchRelay(b *testing.B, size int, opts stdio.Options) {
	h := newHarness(b, opts)
	respTail := []byte(`,"result":{"content":[{"type":"text","text":"` + string(bytes.Repeat([]byte{'x'}, size)) + `"}]}}` + "\n")
	go func() { // the server: echo each request's id in a response
		rd := h.fromProxyS.r
		var buf, out []byte
		for {
			f, err := rd.Read(buf)
			if err != nil {
				return
			}
			buf = f
			out = append(append(append(out[:0], reqHead...), f[len(reqHead):len(reqHead)+idWidth]...), respTail...)
			if _, err := h.toProxyS.Write(out); err != nil {
				return
			}
		}
	}()
	n := b.N
	go func() { // the client: send every request
		var req []byte
		for i := range n {
			req = append(req[:0], reqHead...)
			req = strconv.AppendInt(req, int64(1_000_000_000+i), 10) // idWidth digits
			req = append(req, reqMid...)
			req = strconv.AppendInt(req, int64(i), 10) // tokens are unique, as the spec requires
			req = append(append(req, reqTail...), '\n')
			if _, err := h.toProxyC.Write(req); err != nil {
				return
			}
		}
	}()
	b.SetBytes(int64(len(reqHead) + idWidth + len(reqMid) + len(reqTail) + len(reqHead) + idWidth + len(respTail)))
	b.ReportAllocs()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	var buf []byte
	for range n {
		f, err := h.fromProxyC.r.Read(buf)
		if err != nil {
			b.Fatal(err)
		}
		buf = f
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(2*n), "allocs/frame")
}

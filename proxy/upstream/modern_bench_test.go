package upstream

import (
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// BenchmarkModernize: the cost of rewriting a 2025 request as a 2026-07-28 one.
func BenchmarkModernize(b *testing.B) {
	msg := []byte(`{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello world, this is a test"},"_meta":{"progressToken":"p17"}}}`)
	var f framing.Frame
	if err := f.Parse(msg); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		Modernize(&f.Msgs[0], nil)
	}
}

package httpx

import "testing"

// BenchmarkModernize: the cost of rewriting a 2025 request as a 2026-07-28 one.
func BenchmarkModernize(b *testing.B) {
	msg := []byte(`{"jsonrpc":"2.0","id":17,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello world, this is a test"},"_meta":{"progressToken":"p17"}}}`)
	b.ReportAllocs()
	for b.Loop() {
		modernize(msg, nil)
	}
}

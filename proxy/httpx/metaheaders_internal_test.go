package httpx

import (
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/mcpheader"
)

// TestMismatchTrimsWhiteSpace: the white space RFC 9110 allows around a
// field value is no part of it (the conformance suite's
// ServerAcceptsWhitespaceHeaderValue); inside the value it is.
func TestMismatchTrimsWhiteSpace(t *testing.T) {
	t.Parallel()
	var f framing.Frame
	if err := f.Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}`)); err != nil {
		t.Fatal(err)
	}
	for value, agrees := range map[string]bool{"  echo \t": true, "echo": true, "ec ho": false} {
		var req fasthttp.Request
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", value)
		if why := mismatch(&req, &f.Msgs[0], "2026-07-28", &mcpheader.Tools{}); (why == "") != agrees {
			t.Errorf("Mcp-Name %q: mismatch %q, want agreement %v", value, why, agrees)
		}
	}
}

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

// TestMismatchOfATask: the tasks extension's requests carry their task's
// id in Mcp-Name; one missing or naming another task is a mismatch
// (the conformance suite's tasks-request-headers), and tasks/result,
// which 2026-07-28 does not have, is not checked.
func TestMismatchOfATask(t *testing.T) {
	t.Parallel()
	for _, method := range []string{"tasks/get", "tasks/update", "tasks/cancel", "tasks/result"} {
		var f framing.Frame
		if err := f.Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"` + method + `","params":{"taskId":"t-1"}}`)); err != nil {
			t.Fatal(err)
		}
		checked := method != "tasks/result"
		for value, agrees := range map[string]bool{"t-1": true, "t-2": !checked, "": !checked} {
			var req fasthttp.Request
			req.Header.Set("Mcp-Method", method)
			if value != "" {
				req.Header.Set("Mcp-Name", value)
			}
			if why := mismatch(&req, &f.Msgs[0], "2026-07-28", nil); (why == "") != agrees {
				t.Errorf("%s with Mcp-Name %q: mismatch %q, want agreement %v", method, value, why, agrees)
			}
		}
	}
}

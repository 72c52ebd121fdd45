package httpx_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// TestUpgradedRequestsKeepTheirRevisionsShape: a 2025 client's requests
// to a stateless go-sdk server go upgraded to 2026-07-28 (so that a closed
// stream cancels them), but their answers come back as that server gives
// them to the client directly: a JSON-RPC error with HTTP 200 (the
// 2026-07-28 answer is 400), a result without resultType; with JSON and
// with event-stream answers.
func TestUpgradedRequestsKeepTheirRevisionsShape(t *testing.T) {
	watchdog(t, 30*time.Second)
	for _, jsonMode := range []bool{false, true} {
		s := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "1"}, nil)
		mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo"}}}, nil, nil
		})
		srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
			&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: jsonMode}))
		direct := &rawClient{t: t, url: srv.URL}
		via := &rawClient{t: t, url: startSidecar(t, srv.URL, proxy.TrackerOptions{})}
		for i, body := range []string{
			`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo","arguments":{}}}`,
			`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"no_such_tool","arguments":{}}}`,
		} {
			req := fmt.Sprintf(body, i+1)
			want, wantBody := answer(direct, req)
			got, gotBody := answer(via, req)
			if got != want {
				t.Errorf("json=%v %s: HTTP %d through the sidecar (%s), %d directly (%s)", jsonMode, req, got, gotBody, want, wantBody)
			}
			if strings.Contains(gotBody, "resultType") != strings.Contains(wantBody, "resultType") {
				t.Errorf("json=%v %s: through the sidecar %s, directly %s", jsonMode, req, gotBody, wantBody)
			}
		}
		// An unknown method: the go-sdk answers a 2025 client with a text
		// 400 (no JSON-RPC at all); through the sidecar the client gets the
		// JSON-RPC error, with 200, as its revision has it.
		if code, body := answer(via, `{"jsonrpc":"2.0","id":9,"method":"no/such/method","params":{}}`); code != 200 || !strings.Contains(body, `"code":-32601`) {
			t.Errorf("json=%v: an unknown method through the sidecar: %d %s", jsonMode, code, body)
		}
		srv.Close()
	}
}

// answer posts req and returns the status and the body.
func answer(c *rawClient, req string) (int, string) {
	resp := c.post(req)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

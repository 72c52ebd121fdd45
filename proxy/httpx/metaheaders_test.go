package httpx_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
)

// TestHeaderMismatchRefused: where the sidecar is the 2026-07-28 server
// its client sees (in front of a stdio server, and of an HTTP+SSE server),
// a request whose metadata headers are missing or disagree with its body is
// refused with 400 and HeaderMismatch (-32020), as the spec's server does;
// one whose headers agree (Mcp-Name decoded from the Base64 sentinel form
// where it is one) goes on. Before, every one went on.
func TestHeaderMismatchRefused(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	_, _, sse := sseUpstream(t)
	for front, url := range map[string]string{
		"stdio server":    childSidecar(t, &httpx.Children{}),
		"HTTP+SSE server": sse,
	} {
		const call = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"%s","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"%s"}}}`
		for _, tc := range []struct {
			name, body string
			headers    map[string]string
			refused    bool
		}{
			{"agree", fmt.Sprintf(call, "echo", "2026-07-28"), map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "echo"}, false},
			{"agree, encoded", fmt.Sprintf(call, "gr\u00fc\u00dfe", "2026-07-28"), map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "=?base64?Z3LDvMOfZQ==?="}, false},
			{"no Mcp-Method", fmt.Sprintf(call, "echo", "2026-07-28"), map[string]string{"Mcp-Name": "echo"}, true},
			{"other Mcp-Method", fmt.Sprintf(call, "echo", "2026-07-28"), map[string]string{"Mcp-Method": "tools/list", "Mcp-Name": "echo"}, true},
			{"no Mcp-Name", fmt.Sprintf(call, "echo", "2026-07-28"), map[string]string{"Mcp-Method": "tools/call"}, true},
			{"other Mcp-Name", fmt.Sprintf(call, "echo", "2026-07-28"), map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "rm"}, true},
			{"bad sentinel", fmt.Sprintf(call, "echo", "2026-07-28"), map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "=?base64?!!?="}, true},
			{"other version in _meta", fmt.Sprintf(call, "echo", "2025-11-25"), map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "echo"}, true},
		} {
			t.Run(front+"/"+tc.name, func(t *testing.T) {
				req, _ := http.NewRequest("POST", url, strings.NewReader(tc.body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set("MCP-Protocol-Version", "2026-07-28")
				for k, v := range tc.headers {
					req.Header.Set(k, v)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var answer struct {
					Error *struct{ Code int } `json:"error"`
				}
				json.Unmarshal(body, &answer)
				refused := resp.StatusCode == http.StatusBadRequest && answer.Error != nil && answer.Error.Code == -32020
				if refused != tc.refused {
					t.Errorf("HTTP %d %s; want refused %v", resp.StatusCode, body, tc.refused)
				}
			})
		}
	}
}

package httpx_test

import (
	"cmp"
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
			version    string      // the MCP-Protocol-Version header; "": 2026-07-28
			repeat     [][2]string // headers added once more
		}{
			{"agree", fmt.Sprintf(call, "echo", "2026-07-28"), map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "echo"}, false, "", nil},
			{"agree, encoded", fmt.Sprintf(call, "gr\u00fc\u00dfe", "2026-07-28"), map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "=?base64?Z3LDvMOfZQ==?="}, false, "", nil},
			{"no Mcp-Method", fmt.Sprintf(call, "echo", "2026-07-28"), map[string]string{"Mcp-Name": "echo"}, true, "", nil},
			{"other Mcp-Method", fmt.Sprintf(call, "echo", "2026-07-28"), map[string]string{"Mcp-Method": "tools/list", "Mcp-Name": "echo"}, true, "", nil},
			{"no Mcp-Name", fmt.Sprintf(call, "echo", "2026-07-28"), map[string]string{"Mcp-Method": "tools/call"}, true, "", nil},
			{"other Mcp-Name", fmt.Sprintf(call, "echo", "2026-07-28"), map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "rm"}, true, "", nil},
			{"bad sentinel", fmt.Sprintf(call, "echo", "2026-07-28"), map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "=?base64?!!?="}, true, "", nil},
			{"other version in _meta", fmt.Sprintf(call, "echo", "2025-11-25"), map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "echo"}, true, "", nil},
			// Before, the four below went on.
			{"a 2025 header on a 2026-07-28 body", fmt.Sprintf(call, "echo", "2026-07-28"), map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "echo"}, true, "2025-11-25", nil},
			{"repeated Mcp-Method", fmt.Sprintf(call, "echo", "2026-07-28"), map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "echo"}, true, "", [][2]string{{"Mcp-Method", "tools/call"}}},
			{"repeated Mcp-Name", fmt.Sprintf(call, "echo", "2026-07-28"), map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "echo"}, true, "", [][2]string{{"mcp-name", "rm"}}},
			{"repeated Mcp-Param", fmt.Sprintf(call, "echo", "2026-07-28"), map[string]string{"Mcp-Method": "tools/call", "Mcp-Name": "echo", "Mcp-Param-Region": "eu"}, true, "", [][2]string{{"Mcp-Param-Region", "us"}}},
		} {
			t.Run(front+"/"+tc.name, func(t *testing.T) {
				req, _ := http.NewRequest("POST", url, strings.NewReader(tc.body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set("MCP-Protocol-Version", cmp.Or(tc.version, "2026-07-28"))
				for k, v := range tc.headers {
					req.Header.Set(k, v)
				}
				for _, kv := range tc.repeat {
					req.Header.Add(kv[0], kv[1])
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

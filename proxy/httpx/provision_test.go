package httpx_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
)

// TestSidecarValidate: each bad configuration is refused, by Validate and
// by Provision, with words that name what is wrong; a good one passes, and
// Provision leaves the fields as they were set.
func TestSidecarValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		sc   *httpx.Sidecar
		want string
	}{
		{"no upstream", &httpx.Sidecar{}, "not an http(s) URL"},
		{"not http", &httpx.Sidecar{Upstream: "ftp://x/mcp"}, "not an http(s) URL"},
		{"children without a server", &httpx.Sidecar{Children: &httpx.Children{}}, "no server command"},
		{"unknown transport", &httpx.Sidecar{Upstream: "http://127.0.0.1:1/mcp", UpstreamTransport: "grpc"}, `upstream transport "grpc"`},
		{"relative path", &httpx.Sidecar{Upstream: "http://127.0.0.1:1/mcp", Path: "mcp"}, `path "mcp" does not start with /`},
		{"legacy path on the MCP path", &httpx.Sidecar{Upstream: "http://127.0.0.1:1/mcp", Legacy: &httpx.Legacy{SSEPath: "/mcp"}}, `legacy path "/mcp"`},
		{"legacy paths the same", &httpx.Sidecar{Upstream: "http://127.0.0.1:1/mcp", Legacy: &httpx.Legacy{SSEPath: "/x", MessagePath: "/x"}}, "both"},
		{"negative grace", &httpx.Sidecar{Upstream: "http://127.0.0.1:1/mcp", CancelGrace: -2}, "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.sc.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate: %v, want an error saying %q", err, tc.want)
			}
			if err := tc.sc.Provision(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Provision: %v, want an error saying %q", err, tc.want)
			}
			if _, err := tc.sc.Handler(); err == nil {
				t.Error("Handler: no error")
			}
		})
	}
	good := httpx.Sidecar{Upstream: "http://127.0.0.1:1/mcp", Legacy: &httpx.Legacy{}}
	if err := good.Provision(); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if good.Path != "" || good.MaxBodySize != 0 || good.CancelGrace != 0 {
		t.Errorf("Provision changed the configuration: path %q, max body %d, grace %v", good.Path, good.MaxBodySize, good.CancelGrace)
	}
	good.Cleanup("test") // nothing started: returns at once
}

// TestUpgradeStateless: a 2025 client's sessionless call to a stateless
// upstream that says it speaks 2026-07-28 goes as a 2026-07-28 request
// (header and _meta), unless KeepRevision is set; a call in a session, and
// initialize, go as they are.
func TestUpgradeStateless(t *testing.T) {
	t.Parallel()
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprintf("KeepRevision=%v", keep), func(t *testing.T) {
			watchdog(t, 30*time.Second)
			seen := make(chan string, 8) // method, header version, _meta version of each request
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var m struct {
					ID     any    `json:"id"`
					Method string `json:"method"`
					Params struct {
						Meta map[string]any `json:"_meta"`
					} `json:"params"`
				}
				json.NewDecoder(r.Body).Decode(&m)
				w.Header().Set("Content-Type", "application/json")
				if m.Method == "server/discover" {
					fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%q,"result":{"supportedVersions":["2026-07-28","2025-06-18"],"capabilities":{}}}`, m.ID)
					return
				}
				seen <- fmt.Sprintf("%s %s %v", m.Method, r.Header.Get("MCP-Protocol-Version"), m.Params.Meta["io.modelcontextprotocol/protocolVersion"])
				id, _ := json.Marshal(m.ID)
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{}}`, id)
			}))
			t.Cleanup(up.Close)
			c := &rawClient{t: t, url: serveSidecar(t, &httpx.Sidecar{Upstream: up.URL, KeepRevision: keep})}
			for _, body := range []string{
				`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`,
				`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
			} {
				resp := c.post(body)
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			want := []string{"initialize 2025-06-18 <nil>", "tools/list 2026-07-28 2026-07-28"}
			if keep {
				want[1] = "tools/list 2025-06-18 <nil>"
			}
			for _, w := range want {
				if got := <-seen; got != w {
					t.Errorf("upstream saw %q, want %q", got, w)
				}
			}
		})
	}
}

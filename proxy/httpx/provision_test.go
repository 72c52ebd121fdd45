package httpx_test

import (
	"strings"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
)

// TestSidecarValidate: each bad configuration is refused, by Validate and
// by Provision, with words that name what is wrong; a good one passes, and
// Provision leaves the fields as they were set.
func TestSidecarValidate(t *testing.T) {
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
		{"negative grace", &httpx.Sidecar{Upstream: "http://127.0.0.1:1/mcp", CancelGrace: -1}, "negative"},
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

//go:build unix

package main

import (
	"io"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// TestE2EFastMCPSharedIDs: two calls in flight at once with one id (as
// claude.ai's connector sends them) through the sidecar to FastMCP, over
// Streamable HTTP and over HTTP+SSE, each get their own answer on their own
// stream (the Python SDK's server, reached directly, may deliver one's
// answer to the other: python-sdk issue 3060).
func TestE2EFastMCPSharedIDs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ mode, path string }{{"--http", "/mcp"}, {"--sse", "/sse"}} {
		t.Run(c.mode, func(t *testing.T) {
			watchdog(t, 60*time.Second)
			up, _ := startFastMCP(t, c.mode)
			front := freePort(t)
			sidecar := startWrapped(t, "--listen", front, "--upstream", "http://"+up+c.path)
			sidecar.events.waitFor(t, events.SidecarListening)
			t.Cleanup(func() { sidecar.cmd.Process.Signal(syscall.SIGTERM) })
			url := "http://" + front + "/mcp"
			resp := mcpPost(t, url, "", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`)
			session := resp.Header.Get("Mcp-Session-Id")
			io.ReadAll(resp.Body)
			resp.Body.Close()
			if session == "" {
				t.Fatalf("no session: HTTP %d", resp.StatusCode)
			}
			mcpPost(t, url, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()
			var wg sync.WaitGroup
			got := make([]string, 2)
			for i, secs := range []string{"1.0", "1.5"} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := mcpPost(t, url, session, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","arguments":{"seconds":`+secs+`,"steps":2}}}`)
					defer r.Body.Close()
					b, _ := io.ReadAll(r.Body)
					got[i] = string(b)
				}()
			}
			wg.Wait()
			for i, secs := range []string{"1.0", "1.5"} {
				if !strings.Contains(got[i], "slow done after "+secs+"s") || !strings.Contains(got[i], `"id":1`) {
					t.Errorf("the call of %ss got %q, want its own answer under id 1", secs, got[i])
				}
			}
		})
	}
}

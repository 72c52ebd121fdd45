//go:build unix

package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// TestE2EStdioServerOverHTTPOverLongLine: a stdio server served over HTTP
// whose answer is longer than limits.max_frame_size has it skipped as the
// wrapper skips an over-long line: its request gets -32603 saying so, and
// the session goes on. The example server's greeting escapes each "<" of
// the name (\u003c), so a request within the limit gets an answer over it.
// Through the sidecar's two fronts (the go-sdk's Streamable HTTP client and
// its old HTTP+SSE one), whose sessions read the server's lines with the
// limit of the configuration.
func TestE2EStdioServerOverHTTPOverLongLine(t *testing.T) {
	t.Parallel()
	for _, front := range []string{"sidecar", "legacy-client"} {
		t.Run(front, func(t *testing.T) {
			t.Parallel()
			watchdog(t, 60*time.Second)
			path, _ := writeConfig(t, "limits:\n  max_frame_size: 4KiB\n")
			addr := freePort(t)
			sc := startWrapped(t, "--config", path, "--log-level", "debug", "--listen", addr, "--", proxyBin, "example-server")
			t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
			sc.events.waitFor(t, events.SidecarListening)
			call := goClientArgs(t, front, addr)
			got := call("greet", map[string]any{"name": strings.Repeat("<", 1500)})
			if got.code != -32603 || !strings.Contains(got.message, "exceeds the limit of 4096 bytes") {
				t.Errorf("the over-long answer: the client saw %.160s, want -32603 naming the limit", fmt.Sprint(got))
			}
			if got := call("greet", map[string]any{"name": "t"}); got.text != "Hello, t!" {
				t.Errorf("a call after it: %+v, want its greeting", got)
			}
		})
	}
}

//go:build unix

package main

import (
	"context"
	"net"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// pauses are what an LLM client waits between two tool calls, often: past
// the 5 s after which Node's HTTP server and uvicorn close an idle
// keep-alive connection. They are real: these servers run on the real
// clock.
var pauses = []time.Duration{6 * time.Second, 7 * time.Second}

// TestE2ECallsAfterAPause: a client calls, pauses past the 5 s idle close of
// a real Node server (server-everything, Streamable HTTP and HTTP+SSE) and
// of uvicorn (FastMCP), and calls again, through the sidecar and through
// the bridge: every call is answered. Before, the proxy sent the call after
// the pause on the connection the server had closed and answered -32000/
// -32603 "the server closed connection before returning the first response
// byte". The cases run in parallel, since each waits in real time.
func TestE2ECallsAfterAPause(t *testing.T) {
	t.Parallel()
	node, dir := nodePeers(t)
	loopback := filepath.Join(sharedDir(t), "tools", "loopback.cjs")
	everything := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	type upstreamKind struct {
		name  string
		start func(t *testing.T) (url string)
		tool  string
		args  map[string]any
	}
	nodeServer := func(mode, path string) func(t *testing.T) string {
		return func(t *testing.T) string {
			addr := freePort(t)
			_, port, _ := net.SplitHostPort(addr)
			startBackgroundEnv(t, []string{"PORT=" + port}, node, "--require", loopback, everything, mode)
			waitListening(t, addr)
			return "http://" + addr + path
		}
	}
	uvicorn := func(t *testing.T) string {
		addr, _ := startFastMCP(t, "--http")
		return "http://" + addr + "/mcp"
	}
	kinds := []upstreamKind{
		{name: "server-everything", start: nodeServer("streamableHttp", "/mcp"), tool: "echo", args: map[string]any{"message": "m"}},
		{name: "server-everything HTTP+SSE", start: nodeServer("sse", "/sse"), tool: "echo", args: map[string]any{"message": "m"}},
		{name: "FastMCP", start: uvicorn, tool: "echo", args: map[string]any{"message": "m"}},
	}
	for _, k := range kinds {
		for _, via := range []string{"sidecar", "bridge"} {
			t.Run(k.name+" through the "+via, func(t *testing.T) {
				t.Parallel()
				watchdog(t, 90*time.Second)
				url := k.start(t)
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				cs := connectVia(ctx, t, via, url)
				defer cs.Close()
				call := func(when string) {
					t.Helper()
					r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: k.tool, Arguments: k.args})
					if err != nil || r.IsError {
						t.Fatalf("the call %s: %v %+v", when, err, r)
					}
				}
				call("before any pause")
				for _, p := range pauses {
					time.Sleep(p) // the scenario itself: a client's pause between two calls
					call("after a pause of " + p.String())
				}
			})
		}
	}
}

// connectVia connects the go-sdk client to the MCP server at url through
// the sidecar (its Streamable HTTP front) or the bridge (its stdio).
func connectVia(ctx context.Context, t *testing.T, via, url string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "pause-e2e", Version: "1"}, nil)
	var transport mcp.Transport
	if via == "bridge" {
		cmd := exec.Command(proxyBin, "--upstream", url, "--log-level", "debug")
		stderr, _ := cmd.StderrPipe()
		logs := newLogTail(stderr)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("the bridge's log:\n%s", logs.all())
			}
		})
		transport = &mcp.CommandTransport{Command: cmd}
	} else {
		front := freePort(t)
		sidecar := startWrapped(t, "--listen", front, "--upstream", url, "--log-level", "debug")
		sidecar.events.waitFor(t, events.SidecarListening)
		t.Cleanup(func() { sidecar.cmd.Process.Signal(syscall.SIGTERM) })
		transport = &mcp.StreamableClientTransport{Endpoint: "http://" + front + "/mcp"}
	}
	cs, err := client.Connect(ctx, transport, nil)
	if err != nil {
		t.Fatalf("connecting through the %s: %v", via, err)
	}
	return cs
}

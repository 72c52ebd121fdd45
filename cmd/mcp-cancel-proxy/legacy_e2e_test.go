//go:build unix

package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// TestE2ESupergatewaySSEUpstream: supergateway serving a stdio server (mcp-go)
// as an HTTP+SSE server, reached by a stdio client through the bridge: the
// cancel POSTed to supergateway reaches mcp-go, whose late error is held
// back.
func TestE2ESupergatewaySSEUpstream(t *testing.T) {
	t.Parallel()
	node, dir := nodePeers(t)
	loopback := filepath.Join(sharedDir(t), "tools", "loopback.cjs")
	up := freePort(t)
	_, port, _ := net.SplitHostPort(up)
	startBackground(t, node, "--require", loopback, filepath.Join(dir, "node_modules", "supergateway", "dist", "index.js"),
		"--stdio", buildMcpGo(t), "--outputTransport", "sse", "--port", port)
	waitListening(t, up)
	w := startWrapped(t, "--log-level", "debug", "--upstream", "http://"+up+"/sse")
	mcpGoLateError(t, w)
	w.events.waitFor(t, events.UpstreamDetected, "transport", "sse")
}

// TestE2EMcpRemoteThroughLegacyEndpoints: mcp-remote, as an old client
// (--transport sse-only), reaches mcp-go as a stdio child through the
// sidecar's legacy endpoints; a stdio client's cancel travels through
// mcp-remote, the sidecar holds the late error back.
func TestE2EMcpRemoteThroughLegacyEndpoints(t *testing.T) {
	t.Parallel()
	front := freePort(t)
	sc := startWrapped(t, "--listen", front, "--log-level", "debug", "--", buildMcpGo(t))
	sc.events.waitFor(t, events.SidecarListening)
	t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
	mcpGoLateErrorLogged(t, mcpRemoteSSE(t, front), sc.events)
	sc.events.waitFor(t, events.LegacySessionOpened)
}

// mcpRemoteSSE starts mcp-remote as an old client (--transport sse-only)
// of the sidecar's legacy endpoints at front; the test talks to it as its
// stdio client.
func mcpRemoteSSE(t *testing.T, front string) *wrapped {
	node, dir := nodePeers(t)
	loopback := filepath.Join(sharedDir(t), "tools", "loopback.cjs")
	cmd := exec.Command(node, "--require", loopback, filepath.Join(dir, "node_modules", "mcp-remote", "dist", "proxy.js"),
		"http://"+front+"/sse", "--transport", "sse-only")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "MCP_REMOTE_CONFIG_DIR="+t.TempDir())
	return startCommand(t, cmd)
}

// TestE2EMcpRemoteToSSEUpstream: the HTTP+SSE transport on both sides:
// mcp-remote (sse-only) through the sidecar's legacy endpoints to mcp-go's
// HTTP+SSE server; the cancel is POSTed to mcp-go's message endpoint, whose
// late error (its word that the cancel reached it) is held back.
func TestE2EMcpRemoteToSSEUpstream(t *testing.T) {
	t.Parallel()
	up, front := freePort(t), freePort(t)
	startBackground(t, buildMcpGo(t), "-sse", up)
	waitListening(t, up)
	sc := startWrapped(t, "--listen", front, "--log-level", "debug", "--upstream", "http://"+up+"/sse")
	sc.events.waitFor(t, events.SidecarListening)
	t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
	mcpGoLateErrorLogged(t, mcpRemoteSSE(t, front), sc.events)
	sc.events.waitFor(t, events.LegacySessionOpened)
}

// TestE2EMcpRemoteToStatelessUpstream: an old client that speaks 2025
// (mcp-remote, sse-only) through the legacy endpoints to a stateless
// server (the example server on the go-sdk's stateless handler): its
// requests go as 2026-07-28 ones, and its cancel, a closed stream, reaches
// the tool.
func TestE2EMcpRemoteToStatelessUpstream(t *testing.T) {
	t.Parallel()
	up, front := freePort(t), freePort(t)
	server := startExampleStateless(t, up)
	sc := startWrapped(t, "--listen", front, "--log-level", "debug", "--upstream", "http://"+up+"/mcp")
	sc.events.waitFor(t, events.SidecarListening)
	t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
	statelessCancel(t, mcpRemoteSSE(t, front), sc.events, server)
}

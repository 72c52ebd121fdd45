//go:build unix

package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// TestE2ESupergatewaySSEUpstream: supergateway serving a stdio server (mcp-go)
// as an HTTP+SSE server, reached by a stdio client through the bridge: the
// cancel POSTed to supergateway reaches mcp-go, whose late error is held
// back.
func TestE2ESupergatewaySSEUpstream(t *testing.T) {
	node, dir := nodePeers(t)
	loopback := filepath.Join(sharedDir(t), "tools", "loopback.cjs")
	up := freePort(t)
	_, port, _ := net.SplitHostPort(up)
	startBackground(t, node, "--require", loopback, filepath.Join(dir, "node_modules", "supergateway", "dist", "index.js"),
		"--stdio", buildMcpGo(t), "--outputTransport", "sse", "--port", port)
	waitListening(t, up)
	w := startWrapped(t, "--log-level", "debug", "--upstream", "http://"+up+"/sse")
	mcpGoLateError(t, w)
	w.logs.waitFor(t, "upstream transport detected", "sse")
}

// TestE2EMcpRemoteThroughLegacyEndpoints: mcp-remote, as an old client
// (--transport sse-only), reaches mcp-go as a stdio child through the
// sidecar's legacy endpoints; a stdio client's cancel travels through
// mcp-remote, the sidecar holds the late error back.
func TestE2EMcpRemoteThroughLegacyEndpoints(t *testing.T) {
	node, dir := nodePeers(t)
	loopback := filepath.Join(sharedDir(t), "tools", "loopback.cjs")
	front := freePort(t)
	sc := startWrapped(t, "--listen", front, "--log-level", "debug", "--", buildMcpGo(t))
	sc.logs.waitFor(t, "sidecar listening")
	t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
	cmd := exec.Command(node, "--require", loopback, filepath.Join(dir, "node_modules", "mcp-remote", "dist", "proxy.js"),
		"http://"+front+"/sse", "--transport", "sse-only")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "MCP_REMOTE_CONFIG_DIR="+t.TempDir())
	w := startCommand(t, cmd)
	mcpGoLateErrorLogged(t, w, sc.logs)
	sc.logs.waitFor(t, "HTTP+SSE client session opened")
}

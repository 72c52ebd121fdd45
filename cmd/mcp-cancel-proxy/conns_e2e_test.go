//go:build linux

package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// TestE2ESidecarServesThroughRunningOutOfDescriptors: a sidecar allowed 256
// descriptors, held 400 idle connections by one client, still answers a
// new client's initialize, and is still running: the accept that fails
// with EMFILE closes the idlest idle connection and goes on. fasthttp's
// Serve returned on it before, and the sidecar exited ("serving failed")
// (issue 40, item 2).
func TestE2ESidecarServesThroughRunningOutOfDescriptors(t *testing.T) {
	t.Parallel()
	front := freePort(t)
	cmd := exec.Command("bash", "-c", fmt.Sprintf("ulimit -n 256 && exec %s --listen %s -- %s example-server", proxyBin, front, proxyBin))
	w := startCommand(t, cmd)
	waitListening(t, front)
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for range 400 {
		c, err := net.Dial("tcp", front)
		if err != nil {
			t.Fatalf("dialling the sidecar: %v", err)
		}
		idle = append(idle, c)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+front+"/mcp", strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		t.Fatalf("a new client after 400 idle connections: %v\n%s", err, w.logs.all())
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"serverInfo"`) {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	select {
	case <-w.exited:
		t.Fatalf("the sidecar exited:\n%s", w.logs.all())
	default:
	}
	w.cmd.Process.Signal(syscall.SIGTERM)
	if code := w.wait(); code != 0 {
		t.Errorf("exit status %d after SIGTERM", code)
	}
}

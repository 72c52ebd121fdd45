//go:build unix

package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// TestE2ERefusedClientHearsWhy: a proxy that cannot serve (its command is
// missing, its upstream unreachable) answers its client's requests with a
// JSON-RPC error naming the cause, then exits 1 once the client leaves
// (TestConformanceRefusedSignInAnswered: a sign-in refused while the
// bridge finds out the upstream's transport). Before,
// the client saw only "Connection closed", and a client that starts as a
// 2026-07-28 one does (server/discover first) waited for an answer until
// its own timeout (the conformance suite's refused-sign-in scenarios).
func TestE2ERefusedClientHearsWhy(t *testing.T) {
	t.Parallel()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := "http://" + ln.Addr().String() + "/mcp"
	ln.Close() // nothing listens there now
	const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	const discover = `{"jsonrpc":"2.0","id":"d1","method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
	for _, c := range []struct {
		name  string
		args  []string
		first string
		id    any
		why   string
	}{
		{"missing command", []string{"--", "/nonexistent/mcp-server"}, initialize, float64(1), "cannot start the MCP server"},
		{"unreachable upstream", []string{"--upstream", closed}, discover, "d1", "cannot reach the upstream MCP server"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(proxyBin, c.args...)
			cmd.Env = append(cmd.Environ(), "XDG_STATE_HOME="+t.TempDir(), "BROWSER=false")
			cmd.WaitDelay = 5 * time.Second
			in, _ := cmd.StdinPipe()
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill() })
			io.WriteString(in, `{"jsonrpc":"2.0","method":"notifications/ignored"}`+"\n"+c.first+"\n")
			line := make(chan string, 1)
			go func() {
				s, _ := bufio.NewReader(out).ReadString('\n')
				line <- s
			}()
			var got string
			select {
			case got = <-line:
			case <-time.After(30 * time.Second): // bounds the test
				t.Fatal("the client's first request got no answer")
			}
			var answer struct {
				ID    any
				Error *struct {
					Code    int
					Message string
					Data    map[string]string
				}
			}
			if json.Unmarshal([]byte(got), &answer) != nil || answer.Error == nil || answer.ID != c.id ||
				answer.Error.Code != -32000 || !strings.Contains(answer.Error.Message, c.why) || answer.Error.Data["proxy"] != "mcp-cancel-proxy" {
				t.Errorf("the first request's answer: %q, want the proxy's error naming %q", got, c.why)
			}
			in.Close()
			err := cmd.Wait()
			if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 1 {
				t.Errorf("exit: %v, want status 1", err)
			}
		})
	}
}

// TestE2ESidecarCannotStartItsServer: a sidecar whose stdio server cannot
// start answers the client's initialize, and a request without a session,
// with the proxy's -32000 (kind unavailable), not a bare HTTP 500 as
// before; the command is named in its log only. An old HTTP+SSE client's
// initialize gets the proxy's -32000 on its event stream.
func TestE2ESidecarCannotStartItsServer(t *testing.T) {
	t.Parallel()
	front := freePort(t)
	sc := startWrapped(t, "--listen", front, "--", "/nonexistent/mcp-server")
	sc.events.waitFor(t, events.SidecarListening)
	t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
	for _, body := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, // without a session: the shared server's
	} {
		resp := mcpPost(t, "http://"+front+"/mcp", "", body)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"code":-32000`) || !strings.Contains(string(b), "cannot start the MCP server") ||
			strings.Contains(string(b), "/nonexistent") {
			t.Errorf("%s: %d %s, want the proxy's -32000, the command not named", body, resp.StatusCode, b)
		}
	}
	// An old HTTP+SSE client's initialize: the proxy's -32000 comes on its
	// event stream (the server gone before it answered), which then ends.
	hc := &http.Client{Timeout: 20 * time.Second} // bounds the test
	resp, err := hc.Get("http://" + front + "/sse")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	var endpoint string
	for endpoint == "" {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("no endpoint event: %v", err)
		}
		endpoint = strings.TrimSpace(strings.TrimPrefix(line, "data: "))
		if !strings.HasPrefix(endpoint, "/") {
			endpoint = ""
		}
	}
	post, err := hc.Post("http://"+front+endpoint, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"old","version":"1"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	post.Body.Close()
	rest, _ := io.ReadAll(rd) // to the stream's end
	if !strings.Contains(string(rest), `"id":7`) || !strings.Contains(string(rest), `"code":-32000`) {
		t.Errorf("an HTTP+SSE client's stream after its initialize: %q, want the proxy's error", rest)
	}
}

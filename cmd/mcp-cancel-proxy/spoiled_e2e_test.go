//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/rawmcp"
)

// answer is what a client saw of one tools/call: its result's text, or
// its error's code and data (code -1: an error of the client's own, not
// a JSON-RPC one).
type answer struct {
	text       string
	code       int
	reason     string
	mayHaveRun bool
	message    string
}

func (a answer) String() string {
	if a.code == 0 {
		return fmt.Sprintf("result %q", a.text)
	}
	return fmt.Sprintf("error %d %q (reason %q, may_have_run %v)", a.code, a.message, a.reason, a.mayHaveRun)
}

// caller is a client of one of the proxy's fronts: call calls a tool
// (with the argument name "t") and returns what the client saw.
type caller func(tool string) answer

// fronts are the ways a client reaches an HTTP upstream through the proxy:
// the bridge (a stdio client), the sidecar's Streamable HTTP front (the
// go-sdk's client), and its HTTP+SSE front (the go-sdk's old client).
var fronts = []string{"bridge", "sidecar", "legacy-client"}

// through starts the proxy as front before the upstream at url, with the
// configuration cfg (YAML, may be empty), and returns its client and its
// admin listener's address.
func through(t *testing.T, front, url, cfg string) (caller, string) {
	t.Helper()
	path, _ := writeConfig(t, cfg+"\n")
	adm := freePort(t)
	if front == "bridge" {
		w := startWrapped(t, "--config", path, "--log-level", "debug", "--admin", adm, "--upstream", url)
		w.initialize(`{}`)
		id := 100
		return func(tool string) answer {
			id++
			w.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{"name":"t"}}}`, id, tool))
			got := w.recvUntil(isResponse(id))
			return answerOf(got[len(got)-1])
		}, adm
	}
	addr := freePort(t)
	sc := startWrapped(t, "--config", path, "--log-level", "debug", "--admin", adm, "--listen", addr, "--upstream", url)
	t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
	sc.events.waitFor(t, events.SidecarListening)
	return goClient(t, front, addr), adm
}

// goClient connects the go-sdk's client to the sidecar at addr: its
// Streamable HTTP client, or its old HTTP+SSE one (front legacy-client).
func goClient(t *testing.T, front, addr string) caller {
	t.Helper()
	call := goClientArgs(t, front, addr)
	return func(tool string) answer { return call(tool, map[string]any{"name": "t"}) }
}

// goClientArgs is goClient whose calls take their arguments.
func goClientArgs(t *testing.T, front, addr string) func(tool string, args map[string]any) answer {
	t.Helper()
	var transport mcp.Transport = &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp"}
	if front == "legacy-client" {
		transport = &mcp.SSEClientTransport{Endpoint: "http://" + addr + "/sse"}
	}
	ctx := context.Background()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: front, Version: "1"}, nil).Connect(ctx, transport, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return func(tool string, args map[string]any) answer {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second) // a lost answer fails the test, not hangs it
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		var we *jsonrpc.Error
		switch {
		case errors.As(err, &we):
			a := answer{code: int(we.Code), message: we.Message}
			var data struct {
				Reason     string `json:"reason"`
				MayHaveRun bool   `json:"may_have_run"`
			}
			json.Unmarshal(we.Data, &data)
			a.reason, a.mayHaveRun = data.Reason, data.MayHaveRun
			return a
		case err != nil: // the client's own error (HTTP, its connection, its timeout)
			return answer{code: -1, message: err.Error()}
		}
		if len(res.Content) == 0 {
			return answer{}
		}
		text, _ := res.Content[0].(*mcp.TextContent)
		return answer{text: text.Text}
	}
}

// answerOf reads a response frame as an answer.
func answerOf(m map[string]any) answer {
	if e, ok := m["error"].(map[string]any); ok {
		a := answer{message: fmt.Sprint(e["message"])}
		code, _ := e["code"].(float64)
		a.code = int(code)
		if data, ok := e["data"].(map[string]any); ok {
			a.reason, _ = data["reason"].(string)
			a.mayHaveRun, _ = data["may_have_run"].(bool)
		}
		return a
	}
	r, _ := m["result"].(map[string]any)
	content, _ := r["content"].([]any)
	if len(content) == 0 {
		return answer{}
	}
	first, _ := content[0].(map[string]any)
	text, _ := first["text"].(string)
	return answer{text: text}
}

// TestE2EUpstreamSpoilsAnswers: an upstream that reads a call and closes
// or resets the connection, writes half an answer, an empty 200,
// garbage, the answer to another id, or one over limits.max_frame_size:
// every call gets exactly one answer, the proxy's -32000 with data.reason
// (upstream_lost, upstream_spoiled) and data.may_have_run true (the server
// read it), counted in mcp_cancel_proxy_upstream_errors_total, and the
// session goes on; the server read each call once.
// Through the bridge and the sidecar's two fronts, over a Streamable HTTP
// upstream, and over an HTTP+SSE upstream's POSTs. Before, the bridge and
// old clients were left waiting, unanswered and unlogged, for a spoiled
// JSON answer; the sidecar answered some with 502 and relayed others as
// they came; and a call the server read and dropped was "unreachable".
func TestE2EUpstreamSpoilsAnswers(t *testing.T) {
	t.Parallel()
	streamable := []struct{ tool, reason string }{
		{"close", "upstream_lost"}, {"reset", "upstream_lost"}, {"half", "upstream_spoiled"}, {"empty", "upstream_spoiled"},
		{"garbage", "upstream_spoiled"}, {"other-id", "upstream_spoiled"}, {"oversize", "upstream_spoiled"},
	}
	sse := streamable[:2] // an HTTP+SSE server's answers come on its stream: a POST can only be dropped
	for _, kind := range []string{"streamable", "sse"} {
		for _, front := range fronts {
			if kind == "sse" && front == "legacy-client" {
				continue // the same HTTP+SSE session of the sidecar's as its Streamable front's
			}
			t.Run(kind+"/"+front, func(t *testing.T) {
				t.Parallel()
				watchdog(t, 90*time.Second)
				srv := rawmcp.Start(t, rawmcp.Options{})
				url, cases := "http://"+srv.Addr+"/mcp", streamable
				if kind == "sse" {
					url, cases = "http://"+srv.Addr+"/sse", sse
				}
				call, adm := through(t, front, url, "limits:\n  max_frame_size: 1MiB")
				for _, c := range cases {
					got := call(c.tool)
					if got.code != -32000 || got.reason != c.reason || !got.mayHaveRun {
						t.Errorf("%s: the client saw %v, want -32000, reason %s, may_have_run true", c.tool, got, c.reason)
					}
					if n := len(srv.Calls(c.tool)); n != 1 {
						t.Errorf("%s: the server read the call %d times, want once", c.tool, n)
					}
				}
				if got := call("echo"); got.text != "echo" {
					t.Errorf("a call after them: %v, want its result", got)
				}
				// Counted before each answer was written: no wait.
				if n := metricValue(t, adm, "mcp_cancel_proxy_upstream_errors_total"); n != float64(len(cases)) {
					t.Errorf("mcp_cancel_proxy_upstream_errors_total = %v, want %d", n, len(cases))
				}
			})
		}
	}
}

// TestE2EUpstreamClosesIdleConnections: a server that closes a keep-alive
// connection unused for a second (as gunicorn does after 2 s, Node and
// uvicorn after 5, below http.upstream_idle), saying so in Keep-Alive:
// timeout= or not. The call after the close goes on a new connection,
// with its whole body, once. Before, fasthttp had dropped the body of the
// request found unsent, and it was sent again with Content-Length: 0: the
// server refused it (400), and the bridge and old clients never answered.
// Through every front, over both kinds of upstream.
func TestE2EUpstreamClosesIdleConnections(t *testing.T) {
	t.Parallel()
	for _, say := range []bool{false, true} {
		for _, kind := range []string{"streamable", "sse"} {
			for _, front := range fronts {
				if kind == "sse" && front == "legacy-client" {
					continue
				}
				name := map[bool]string{false: "silent", true: "keep-alive-header"}[say] + "/" + kind + "/" + front
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					watchdog(t, 90*time.Second)
					srv := rawmcp.Start(t, rawmcp.Options{IdleClose: time.Second, SayKeepAlive: say})
					url := "http://" + srv.Addr + map[string]string{"streamable": "/mcp", "sse": "/sse"}[kind]
					call, _ := through(t, front, url, "")
					for i := range 2 {
						if got := call("echo"); got.text != "echo" {
							t.Fatalf("call %d: %v, want its result", i+1, got)
						}
						<-srv.Quiet() // the server closed every connection the proxy had used
					}
					if srv.IdleCloses() == 0 {
						t.Fatal("the server closed no idle connection")
					}
					if got := call("echo"); got.text != "echo" {
						t.Fatalf("the call after the idle close: %v, want its result", got)
					}
					for _, r := range srv.Received() {
						if r.Method == "POST" && len(r.Body) == 0 {
							t.Errorf("the server read a POST to %s with no body", r.Path)
						}
					}
					if n := len(srv.Calls("echo")); n != 3 {
						t.Errorf("the server read %d calls, want 3", n)
					}
				})
			}
		}
	}
}

// TestE2EUpstreamUnreachable: the upstream stops; a call is answered at
// once with the proxy's -32000, upstream_lost, may_have_run false (nothing
// of it reached a server), on every front. (The server closes each
// connection after its answer, so that the proxy keeps none: a request
// written on a connection the server closes as it is written may have
// been read, and is answered may_have_run true.)
func TestE2EUpstreamUnreachable(t *testing.T) {
	t.Parallel()
	for _, front := range fronts {
		t.Run(front, func(t *testing.T) {
			t.Parallel()
			watchdog(t, 60*time.Second)
			srv := rawmcp.Start(t, rawmcp.Options{CloseEach: true})
			call, _ := through(t, front, "http://"+srv.Addr+"/mcp", "")
			if got := call("echo"); got.text != "echo" {
				t.Fatalf("a call: %v", got)
			}
			srv.Close()
			got := call("echo")
			if got.code != -32000 || got.reason != "upstream_lost" || got.mayHaveRun || !strings.Contains(got.message, "could not be reached") {
				t.Errorf("a call to a stopped upstream: %v, want -32000, upstream_lost, may_have_run false", got)
			}
		})
	}
}

// TestE2EUpstreamRestarted: the example server restarts under a running
// sidecar. A client that connects after the restart is served at once:
// its initialize, which goes first on a connection the old server's end
// closed, is sent again on a new one, whole. Before, it went again with
// an empty body, and the new server refused it (400). The client whose
// session the old server held is told so (the new server's 404), not
// left waiting.
func TestE2EUpstreamRestarted(t *testing.T) {
	t.Parallel()
	watchdog(t, 90*time.Second)
	up := freePort(t)
	start := func() *exec.Cmd {
		cmd := exec.Command(proxyBin, "example-server", "--http", up)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitListening(t, up)
		return cmd
	}
	server := start()
	path, _ := writeConfig(t, "\n")
	front := freePort(t)
	sc := startWrapped(t, "--config", path, "--log-level", "debug", "--listen", front, "--upstream", "http://"+up+"/mcp")
	t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
	sc.events.waitFor(t, events.SidecarListening)
	old := goClient(t, "sidecar", front)
	if got := old("greet"); got.text != "Hello, t!" {
		t.Fatalf("a call: %v", got)
	}
	server.Process.Kill()
	server.Wait()
	server = start()
	t.Cleanup(func() { server.Process.Kill(); server.Wait() })
	if got := goClient(t, "sidecar", front)("greet"); got.text != "Hello, t!" {
		t.Errorf("a call of a client that connected after the restart: %v", got)
	}
	if got := old("greet"); got.code == 0 {
		t.Errorf("a call of a session the old server held: %v, want an error", got)
	}
}

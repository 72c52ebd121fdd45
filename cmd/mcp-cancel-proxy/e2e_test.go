//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// wrapExample wraps the bundled go-sdk example server.
func wrapExample(t testing.TB, extra ...string) *wrapped {
	args := append([]string{"--log-level", "debug"}, extra...)
	return startWrapped(t, append(args, "--", proxyBin, "example-server")...)
}

// assertNothingAfter fails if any frame in got concerns the cancelled id or token.
func assertNothingAfter(t *testing.T, got []map[string]any, id any, token string) {
	t.Helper()
	for _, m := range got {
		if concerns(m, id, token) {
			t.Errorf("client got %v after cancelling %v", m, id)
		}
	}
}

// TestE2EServerIgnoresCancel: the go-sdk example server's block tool ignores
// cancellation, reports progress again and answers once released. The proxy
// forwards the cancel and the client sees neither the progress nor the answer.
func TestE2EServerIgnoresCancel(t *testing.T) {
	t.Parallel()
	serverIgnoresCancel(t, wrapExample(t))
}

// TestE2EStdioClientToHTTPUpstream: the same through the stdio-to-HTTP
// bridge (--upstream without --listen), to the example server over
// Streamable HTTP.
func TestE2EStdioClientToHTTPUpstream(t *testing.T) {
	t.Parallel()
	up := freePort(t)
	startBackground(t, proxyBin, "example-server", "--http", up)
	waitListening(t, up)
	w := startWrapped(t, "--log-level", "debug", "--upstream", "http://"+up+"/mcp")
	serverIgnoresCancel(t, w)
	w.events.waitFor(t, events.UpstreamDetected, "transport", "streamable")
}

// TestE2EStdioClient2025ToStatelessUpstream: a stdio client of the 2025
// revisions, bridged to a stateless server (the example server on the
// go-sdk's stateless handler, which takes a closed stream as the cancel of
// a 2026-07-28 request only). The bridge finds with server/discover that
// the server speaks 2026-07-28 and sends the requests as such; the client's
// cancel closes the request's stream, and the server's tool sees its
// request cancelled. Nothing late reaches the client; the session goes on.
func TestE2EStdioClient2025ToStatelessUpstream(t *testing.T) {
	t.Parallel()
	up := freePort(t)
	server := startExampleStateless(t, up)
	w := startWrapped(t, "--log-level", "debug", "--upstream", "http://"+up+"/mcp")
	statelessCancel(t, w, w.events, server)
	w.stdin.Close()
	if code := w.wait(); code != 0 {
		t.Errorf("proxy exit status %d after client EOF, want 0", code)
	}
}

// startExampleStateless serves the example server, stateless, at addr,
// and returns its log.
func startExampleStateless(t *testing.T, addr string) *logTail {
	server := startServer(t, exec.Command(proxyBin, "example-server", "--http", addr, "--stateless"))
	waitListening(t, addr)
	return server
}

// statelessCancel cancels the example server's block tool through w, in
// front of a stateless example server whose log is server: the proxy
// (its events feed) sends the requests as 2026-07-28 ones, and the tool sees its
// request cancelled; nothing of the call reaches the client after.
func statelessCancel(t *testing.T, w *wrapped, feed *eventTail, server *logTail) {
	w.initialize(`{}`)
	feed.waitFor(t, events.UpstreamStateless)
	w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"block","arguments":{"key":"s"},"_meta":{"progressToken":"tok"}}}`)
	w.recvUntil(func(m map[string]any) bool { return concerns(m, "none", "tok") })
	w.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"test"}}`)
	server.waitFor(t, "block s: the request was cancelled")
	w.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"release","arguments":{"key":"s"}}}`)
	got := w.recvUntil(isResponse(3))
	w.send(`{"jsonrpc":"2.0","id":4,"method":"ping"}`)
	got = append(got, w.recvUntil(isResponse(4))...)
	assertNothingAfter(t, got, 2, "tok")
}

// serverIgnoresCancel drives the example server's block tool through w:
// the cancel is accepted and the late progress and answer held back.
func serverIgnoresCancel(t *testing.T, w *wrapped) {
	w.initialize(`{}`)
	w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"block","arguments":{"key":"k"},"_meta":{"progressToken":"tok"}}}`)
	w.recvUntil(func(m map[string]any) bool { return concerns(m, "none", "tok") })
	w.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"test"}}`)
	w.events.waitFor(t, events.CancelAccepted, "id", "2", "reason", "test")
	w.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"release","arguments":{"key":"k"}}}`)
	got := w.recvUntil(isResponse(3))
	w.events.waitFor(t, events.Suppressed, "kind", "response", "id", "2")
	w.send(`{"jsonrpc":"2.0","id":4,"method":"ping"}`)
	got = append(got, w.recvUntil(isResponse(4))...)
	assertNothingAfter(t, got, 2, "tok")
	w.events.waitFor(t, events.Suppressed, "kind", "notification", "method", "notifications/progress")
	w.stdin.Close()
	if code := w.wait(); code != 0 {
		t.Errorf("proxy exit status %d after client EOF, want 0", code)
	}
}

// TestE2EServerHonoursCancel: the tool stops when cancelled, but the go-sdk
// server still answers the cancelled request; the proxy suppresses that.
func TestE2EServerHonoursCancel(t *testing.T) {
	t.Parallel()
	w := wrapExample(t)
	w.initialize(`{}`)
	w.send(`{"jsonrpc":"2.0","id":"h","method":"tools/call","params":{"name":"slow_honour","arguments":{"seconds":60,"steps":600},"_meta":{"progressToken":7}}}`)
	w.recvUntil(func(m map[string]any) bool { return concerns(m, "none", "7") })
	w.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"h"}}`)
	w.events.waitFor(t, events.Suppressed, "kind", "response", "id", `"h"`)
	w.send(`{"jsonrpc":"2.0","id":5,"method":"ping"}`)
	assertNothingAfter(t, w.recvUntil(isResponse(5)), "h", "7")
}

// TestE2EServerCancelsSampling: the server cancels its own sampling request
// when the tool call that made it is cancelled; the cancel reaches the client
// and the client's late answer never reaches the server.
func TestE2EServerCancelsSampling(t *testing.T) {
	t.Parallel()
	w := wrapExample(t)
	w.initialize(`{"sampling":{}}`)
	w.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ask_sampling","arguments":{}}}`)
	got := w.recvUntil(func(m map[string]any) bool { return m["method"] == "sampling/createMessage" })
	samplingID := got[len(got)-1]["id"]
	w.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
	got = w.recvUntil(func(m map[string]any) bool { return m["method"] == "notifications/cancelled" })
	p := got[len(got)-1]["params"].(map[string]any)
	if fmt.Sprint(p["requestId"]) != fmt.Sprint(samplingID) {
		t.Fatalf("server cancelled %v, want the sampling request %v", p["requestId"], samplingID)
	}
	idJSON := strconv.Quote(fmt.Sprint(samplingID))
	if _, isNum := samplingID.(float64); isNum {
		idJSON = fmt.Sprint(samplingID)
	}
	w.send(`{"jsonrpc":"2.0","id":` + idJSON + `,"result":{"role":"assistant","content":{"type":"text","text":"late"},"model":"m"}}`)
	w.events.waitFor(t, events.Suppressed, "from", "client", "direction", "client_to_server")
	w.send(`{"jsonrpc":"2.0","id":9,"method":"ping"}`)
	w.recvUntil(isResponse(9))
}

// TestE2EGoSDKClient drives the proxy with the go-sdk's own client, which
// sends the cancel when the call's context ends.
func TestE2EGoSDKClient(t *testing.T) {
	t.Parallel()
	watchdog(t, 60*time.Second)
	args, feed := eventsFor(t, []string{"--log-level", "debug", "--", proxyBin, "example-server"})
	cmd := exec.Command(proxyBin, args...)
	firstProgress := make(chan struct{})
	var mu sync.Mutex
	var progressAfterCancel int
	cancelled := false
	var once sync.Once
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e-go-sdk", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(ctx context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			if cancelled {
				progressAfterCancel++
			}
			mu.Unlock()
			once.Do(func() { close(firstProgress) })
		},
	})
	ctx := context.Background()
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	blockAndCancel(t, cs, "go-sdk-tok", firstProgress, func() {
		mu.Lock()
		cancelled = true
		mu.Unlock()
	})
	// The go-sdk sends its cancel asynchronously: release the blocked tool
	// only once the proxy has it, or the release could overtake it.
	feed.waitFor(t, events.CancelAccepted)
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "release", Arguments: map[string]any{"key": "g"}}); err != nil {
		t.Fatal(err)
	}
	feed.waitFor(t, events.Suppressed, "kind", "response")
	feed.waitFor(t, events.Suppressed, "method", "notifications/progress")
	if err := cs.Ping(ctx, nil); err != nil {
		t.Fatal(err)
	}
	cs.Close()
	cmd.Wait()
	mu.Lock()
	defer mu.Unlock()
	if progressAfterCancel != 0 {
		t.Errorf("client got %d progress notifications after cancelling", progressAfterCancel)
	}
}

// TestE2EServerCrashesMidCall: every request in flight gets an error that
// says the server is gone, and the proxy exits with the server's status.
func TestE2EServerCrashesMidCall(t *testing.T) {
	t.Parallel()
	w := wrapExample(t)
	w.initialize(`{}`)
	w.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"block","arguments":{"key":"c"},"_meta":{"progressToken":"c"}}}`)
	w.recvUntil(func(m map[string]any) bool { return concerns(m, "none", "c") })
	w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"crash","arguments":{}}}`)
	codes := map[string]any{}
	for len(codes) < 2 {
		m := w.recv()
		if e, ok := m["error"].(map[string]any); ok {
			codes[fmt.Sprint(m["id"])] = e["code"]
		}
	}
	if fmt.Sprint(codes) != "map[1:-32000 2:-32000]" {
		t.Errorf("errors for requests in flight = %v, want -32000 for ids 1 and 2", codes)
	}
	if code := w.wait(); code != 3 {
		t.Errorf("proxy exit status %d, want the server's 3", code)
	}
}

// TestE2EChildIgnoresEOFAndTERM: a server that ignores both stdin EOF and
// SIGTERM, with a child of its own that does too, is killed, group and all.
func TestE2EChildIgnoresEOFAndTERM(t *testing.T) {
	t.Parallel()
	// The script reports its pid and its child's on stderr, which the proxy
	// copies to its own.
	script := `trap "" TERM; sleep 300 & printf "p%s $$ $!\n" "ids:" >&2; wait; wait`
	w := startWrapped(t, "--log-level", "debug", "--term-after", "100ms", "--kill-after", "100ms", "--", "sh", "-c", script)
	line := w.logs.waitFor(t, "pids: ")
	var pids []int
	for _, f := range strings.Fields(line[strings.Index(line, "pids: ")+6:]) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("bad pid line %q", line)
		}
		pids = append(pids, n)
	}
	w.stdin.Close()
	if code := w.wait(); code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
	w.events.waitFor(t, events.ServerSignalled, "signal", "SIGTERM")
	w.events.waitFor(t, events.ServerSignalled, "signal", "SIGKILL")
	for _, pid := range pids {
		if survives(pid) {
			t.Errorf("process %d survived the proxy", pid)
		}
	}
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// TestE2ESIGTERMStopsInOrder: SIGTERM to the proxy stops the server with the
// stop ladder; the request in flight is answered with an error rather than
// left waiting, and the proxy exits 0.
func TestE2ESIGTERMStopsInOrder(t *testing.T) {
	t.Parallel()
	w := wrapExample(t, "--term-after", "200ms")
	w.initialize(`{}`)
	w.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"block","arguments":{"key":"t"},"_meta":{"progressToken":"t"}}}`)
	w.recvUntil(func(m map[string]any) bool { return concerns(m, "none", "t") })
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	got := w.recvUntil(isResponse(1))
	if e, ok := got[len(got)-1]["error"].(map[string]any); !ok || e["code"] != float64(-32000) {
		t.Errorf("request in flight answered %v, want a -32000 error", got[len(got)-1])
	}
	if code := w.wait(); code != 0 {
		t.Errorf("exit status %d after SIGTERM, want 0", code)
	}
	w.events.waitFor(t, events.ServerStopping, "why", "terminated")
}

// TestE2EMcpGoServerLateError: mcp-go cancels the handler's context on a
// cancel, but still writes the handler's result; the proxy keeps it from
// the client.
func TestE2EMcpGoServerLateError(t *testing.T) {
	t.Parallel()
	bin := buildMcpGo(t)
	mcpGoLateError(t, startWrapped(t, "--log-level", "debug", "--", bin))
}

// TestE2EStdioClientToMcpGoSSE: the same through the stdio-to-HTTP bridge,
// to mcp-go's HTTP+SSE server (found out by the probe). mcp-go's handler
// answers only once its context is cancelled: the late answer the proxy
// holds back is the server's word that the cancel reached it.
func TestE2EStdioClientToMcpGoSSE(t *testing.T) {
	t.Parallel()
	up := freePort(t)
	startBackground(t, buildMcpGo(t), "-sse", up)
	waitListening(t, up)
	w := startWrapped(t, "--log-level", "debug", "--upstream", "http://"+up+"/sse")
	mcpGoLateError(t, w)
	w.events.waitFor(t, events.UpstreamDetected, "transport", "sse")
}

// mcpGoLateError cancels mcp-go's wait_for_cancel through w: its late
// error is held back (the proxy's log says so), and nothing of the call
// reaches the client after.
func mcpGoLateError(t *testing.T, w *wrapped) { mcpGoLateErrorLogged(t, w, w.events) }

// mcpGoLateErrorLogged is mcpGoLateError for a client w that is not the
// proxy itself (another program in between): feed is the proxy's events.
func mcpGoLateErrorLogged(t *testing.T, w *wrapped, feed *eventTail) {
	w.initialize(`{}`)
	w.send(`{"jsonrpc":"2.0","id":"m1","method":"tools/call","params":{"name":"wait_for_cancel","arguments":{},"_meta":{"progressToken":"mg"}}}`)
	w.recvUntil(func(m map[string]any) bool { return concerns(m, "none", "mg") })
	w.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"m1"}}`)
	feed.waitFor(t, events.Suppressed, "kind", "response", "id", `"m1"`)
	w.send(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	assertNothingAfter(t, w.recvUntil(isResponse(2)), "m1", "mg")
}

// TestE2ESidecarAdmin: the admin listener's probes and metrics, before and
// after the upstream goes away.
func TestE2ESidecarAdmin(t *testing.T) {
	t.Parallel()
	up, front, adm := freePort(t), freePort(t), freePort(t)
	upstream := exec.Command(proxyBin, "example-server", "--http", up)
	if err := upstream.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { upstream.Process.Kill(); upstream.Wait() }()
	sc := startWrapped(t, "--listen", front, "--upstream", "http://"+up+"/mcp", "--admin", adm)
	t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
	waitListening(t, up)
	sc.events.waitFor(t, events.AdminListening)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + adm + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz = %d", code)
	}
	if code, body := get("/readyz"); code != 200 {
		t.Errorf("/readyz = %d %s with the upstream up", code, body)
	}
	// One request through the sidecar, so that the counters move.
	resp := mcpPost(t, "http://"+front+"/mcp", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"a","version":"1"}}}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	_, metrics := get("/metrics")
	for _, want := range []string{`mcp_cancel_proxy_messages_total{action="forwarded",from="client"} 1`, "mcp_cancel_proxy_sessions 1", "go_goroutines"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	upstream.Process.Kill()
	upstream.Wait()
	if code, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz = %d with the upstream gone, want 503", code)
	}
}

// TestE2ESidecarShutdownCancelsUpstream: on SIGTERM the sidecar stops
// accepting, gives open requests the shutdown grace, then cancels upstream
// what is still running rather than abandoning it, answers its client
// -32000 "the proxy is shutting down" (the stream ended with no answer
// before), and exits 0.
func TestE2ESidecarShutdownCancelsUpstream(t *testing.T) {
	t.Parallel()
	up, front := freePort(t), freePort(t)
	server := startServer(t, exec.Command(proxyBin, "example-server", "--http", up))
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(cfg, []byte("http:\n  shutdown_grace: 200ms\n"), 0o600)
	sc := startWrapped(t, "--config", cfg, "--listen", front, "--upstream", "http://"+up+"/mcp", "--log-level", "debug")
	waitListening(t, up)
	sc.events.waitFor(t, events.SidecarListening)
	post := func(session, body string) *http.Response { return mcpPost(t, "http://"+front+"/mcp", session, body) }
	resp := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"a","version":"1"}}}`)
	session := resp.Header.Get("Mcp-Session-Id")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	post(session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()
	call := sseMessages(post(session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"block","arguments":{"key":"sd"},"_meta":{"progressToken":"s"}}}`))
	<-call // its first progress: the call runs upstream
	if err := sc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var last string
	for m := range call { // progress, then the proxy's answer: the stream did not just end
		last = m
	}
	if !strings.Contains(last, `"id":2`) || !strings.Contains(last, `"code":-32000`) || !strings.Contains(last, "shutting down") {
		t.Errorf("the call's stream ended with %s, want -32000 saying the proxy is shutting down", last)
	}
	sc.events.waitFor(t, events.CancelAccepted, "reason", "the proxy is shutting down")
	server.waitFor(t, "block sd: the request was cancelled") // the shutdown's cancel reached the upstream
	if code := sc.wait(); code != 0 {
		t.Errorf("exit status %d, want 0", code)
	}
}

// TestE2ESidecarShutdownEndsGetStreams: a session's GET stream, which
// never ends by itself, does not hold the shutdown up to its grace (ten
// minutes here): on SIGTERM the sidecar ends it cleanly (the chunked
// body's end) and exits 0, in front of an HTTP server and of a stdio one.
func TestE2ESidecarShutdownEndsGetStreams(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(cfg, []byte("http:\n  shutdown_grace: 10m\n"), 0o600)
	fronts := map[string]func(front string) []string{
		"Streamable HTTP upstream": func(front string) []string {
			up := freePort(t)
			startServer(t, exec.Command(proxyBin, "example-server", "--http", up))
			waitListening(t, up)
			return []string{"--upstream", "http://" + up + "/mcp"}
		},
		"stdio server": func(string) []string { return []string{"--", proxyBin, "example-server"} },
	}
	for name, args := range fronts {
		t.Run(name, func(t *testing.T) {
			front := freePort(t)
			sc := startWrapped(t, append([]string{"--config", cfg, "--listen", front}, args(front)...)...)
			sc.events.waitFor(t, events.SidecarListening)
			url := "http://" + front + "/mcp"
			session := openSession(t, url, "g")
			req, _ := http.NewRequest("GET", url, nil)
			req.Header.Set("Accept", "text/event-stream")
			req.Header.Set("Mcp-Session-Id", session)
			get, err := http.DefaultClient.Do(req)
			if err != nil || get.StatusCode != 200 {
				t.Fatalf("GET: %v %v", get, err)
			}
			ended := make(chan error, 1)
			go func() {
				_, err := io.Copy(io.Discard, get.Body)
				ended <- err
			}()
			if err := sc.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := sc.wait(); code != 0 { // within wait's bound, far below the grace
				t.Errorf("exit status %d, want 0", code)
			}
			if err := <-ended; err != nil {
				t.Errorf("the GET stream ended with %v, want its clean end", err)
			}
		})
	}
}

// TestE2EStdioServerOverHTTP: a stdio server behind --listen, a child per
// session. A POSTed cancel is forwarded to the child, the call's stream
// ends without an answer, and the server's late progress and answer are
// held back; DELETE stops the child.
func TestE2EStdioServerOverHTTP(t *testing.T) {
	t.Parallel()
	front := freePort(t)
	sc := startWrapped(t, "--listen", front, "--cancel-grace", "200ms", "--log-level", "debug", "--", proxyBin, "example-server")
	t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
	sc.events.waitFor(t, events.SidecarListening)
	session := ""
	post := func(body string) *http.Response { return mcpPost(t, "http://"+front+"/mcp", session, body) }
	resp := post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"h","version":"1"}}}`)
	session = resp.Header.Get("Mcp-Session-Id")
	if init := <-sseMessages(resp); !strings.Contains(init, `"serverInfo"`) || session == "" {
		t.Fatalf("initialize: session %q, answer %s", session, init)
	}
	post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()
	call := sseMessages(post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"block","arguments":{"key":"h"},"_meta":{"progressToken":"h"}}}`))
	if first := <-call; !strings.Contains(first, "notifications/progress") {
		t.Fatalf("first event %s, want progress", first)
	}
	cancel := post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"stop"}}`)
	cancel.Body.Close()
	if cancel.StatusCode != http.StatusAccepted {
		t.Errorf("cancel answered %d, want 202", cancel.StatusCode)
	}
	for d := range call { // ends after the grace
		t.Errorf("after the cancel the call's stream carried %s", d)
	}
	if rel := <-sseMessages(post(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"release","arguments":{"key":"h"}}}`)); !strings.Contains(rel, `"id":3`) {
		t.Errorf("release answered %s", rel)
	}
	sc.events.waitFor(t, events.Suppressed, "kind", "response")
	// DELETE with a call in flight: the call is cancelled on the child first.
	pending := sseMessages(post(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"slow_honour","arguments":{"seconds":600,"steps":6000},"_meta":{"progressToken":"d"}}}`))
	<-pending
	req, _ := http.NewRequest("DELETE", "http://"+front+"/mcp", nil)
	req.Header.Set("Mcp-Session-Id", session)
	if del, err := http.DefaultClient.Do(req); err != nil || del.StatusCode != http.StatusOK {
		t.Errorf("DELETE: %v %v", del, err)
	}
	sc.events.waitFor(t, events.CancelAccepted, "id", "4", "reason", "session deleted")
	sc.events.waitFor(t, events.ServerExited)

	// A session still open at shutdown has its child stopped too.
	session = ""
	post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"h","version":"1"}}}`).Body.Close()
	sc.cmd.Process.Signal(syscall.SIGTERM)
	if code := sc.wait(); code != 0 {
		t.Errorf("exit status %d after SIGTERM, want 0", code)
	}
	sc.events.waitCount(t, 2, events.ServerExited)
	<-sc.events.lines.done // the feed read to its end
	if n := sc.events.count(events.ServerExited); n != 2 {
		t.Errorf("%d children reported exiting, want 2", n)
	}
}

// TestE2EStdioServerOverHTTP2026: the go-sdk client, which speaks
// 2026-07-28 when it can, calls a stdio server behind the sidecar and
// abandons the call. Closing the stream is the cancel in that revision; on
// stdio it becomes notifications/cancelled for the child, under the id the
// sidecar gave the request on the shared child.
func TestE2EStdioServerOverHTTP2026(t *testing.T) {
	t.Parallel()
	front := freePort(t)
	sc := startWrapped(t, "--listen", front, "--log-level", "debug", "--", proxyBin, "example-server")
	t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
	sc.events.waitFor(t, events.SidecarListening)
	progressed := make(chan struct{}, 8)
	client := mcp.NewClient(&mcp.Implementation{Name: "go-sdk-2026", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progressed <- struct{}{} },
	})
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: "http://" + front + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		p := &mcp.CallToolParams{Name: "slow_honour", Arguments: map[string]any{"seconds": 600, "steps": 6000}}
		p.SetProgressToken("t26")
		_, err := cs.CallTool(ctx, p)
		errc <- err
	}()
	<-progressed
	cancel()
	if err := <-errc; err == nil {
		t.Error("CallTool returned no error after its context was cancelled")
	}
	sc.events.waitFor(t, events.CancelAccepted, "reason", "the client closed the stream")
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Errorf("tools/list after the cancel: %v", err)
	}
}

// TestE2EStdioSessionIdle: a stdio session left idle has its child stopped.
func TestE2EStdioSessionIdle(t *testing.T) {
	t.Parallel()
	front := freePort(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(cfg, []byte("http:\n  session_idle: 300ms\n"), 0o600)
	sc := startWrapped(t, "--config", cfg, "--listen", front, "--log-level", "debug", "--", proxyBin, "example-server")
	t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
	sc.events.waitFor(t, events.SidecarListening)
	resp := mcpPost(t, "http://"+front+"/mcp", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"i","version":"1"}}}`)
	io.Copy(io.Discard, resp.Body) // the stream ends with the answer
	resp.Body.Close()
	sc.events.waitFor(t, events.SessionIdle)
	sc.events.waitFor(t, events.ServerExited)
}

// TestE2EStdioSessionDisconnectGrace: with the opt-in grace, a client of a
// stdio server's session that drops a call's stream and never POSTs a
// cancel has the call cancelled on the child for it.
func TestE2EStdioSessionDisconnectGrace(t *testing.T) {
	t.Parallel()
	front := freePort(t)
	sc := startWrapped(t, "--listen", front, "--disconnect-cancel-after", "100ms", "--log-level", "debug", "--", proxyBin, "example-server")
	t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
	sc.events.waitFor(t, events.SidecarListening)
	url := "http://" + front + "/mcp"
	session := openSession(t, url, "d")
	call := mcpPost(t, url, session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow_honour","arguments":{"seconds":600,"steps":6000},"_meta":{"progressToken":"p"}}}`)
	if first := <-sseMessages(call); !strings.Contains(first, "notifications/progress") {
		t.Fatalf("first message of the call's stream: %q", first)
	}
	call.Body.Close() // the client leaves without a word
	sc.events.waitFor(t, events.CancelAccepted, "reason", "client disconnected")
}

// TestE2EGoSDKClientToStatelessUpstream: the go-sdk client, which finds
// 2026-07-28 with server/discover, through the sidecar to a stateless
// server (the example server on the go-sdk's stateless handler): the
// client cancels by closing the request's stream, the sidecar closes the
// upstream's, and the tool sees its request cancelled; the client gets no
// progress after, and calls on.
func TestE2EGoSDKClientToStatelessUpstream(t *testing.T) {
	t.Parallel()
	watchdog(t, 60*time.Second)
	up, front := freePort(t), freePort(t)
	server := startExampleStateless(t, up)
	goSDKClientCancelsThroughSidecar(t, front, "http://"+up+"/mcp", server,
		&mcp.StreamableClientTransport{Endpoint: "http://" + front + "/mcp"}, []string{"reason", "client closed the stream"}, false)
}

// TestE2EGoSDKSSEClientToGoSDKSSEServer: the HTTP+SSE transport on both
// sides, the go-sdk's at each end: its SSE client through the sidecar's
// legacy endpoints to the example server on its SSE handler (--sse), in a
// process of its own; the client's POSTed cancel is POSTed on, and the
// tool sees its request cancelled.
func TestE2EGoSDKSSEClientToGoSDKSSEServer(t *testing.T) {
	t.Parallel()
	watchdog(t, 60*time.Second)
	up, front := freePort(t), freePort(t)
	server := startServer(t, exec.Command(proxyBin, "example-server", "--sse", up))
	waitListening(t, up)
	goSDKClientCancelsThroughSidecar(t, front, "http://"+up+"/sse", server,
		&mcp.SSEClientTransport{Endpoint: "http://" + front + "/sse"}, nil, true)
}

// goSDKClientCancelsThroughSidecar runs the sidecar at front in front of
// upstream (the example server, whose log is server) and has the go-sdk
// client, on transport tr, call block and cancel it once it reports
// progress: the tool sees its request cancelled, the sidecar's log says
// how (accepted), the client gets no progress after, and calls on. With
// late, the server answers the cancelled call once released (a stateful
// server; a stateless one lost it with its stream), and the sidecar holds
// the answer back.
func goSDKClientCancelsThroughSidecar(t *testing.T, front, upstream string, server *logTail, tr mcp.Transport, accepted []string, late bool) {
	sc := startWrapped(t, "--listen", front, "--log-level", "debug", "--upstream", upstream)
	sc.events.waitFor(t, events.SidecarListening)
	t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
	progressed := make(chan struct{}, 8)
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e-go-sdk", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progressed <- struct{}{} },
	})
	ctx := context.Background()
	cs, err := client.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	blockAndCancel(t, cs, "g-tok", progressed, func() {})
	server.waitFor(t, "block g: the request was cancelled")
	sc.events.waitFor(t, events.CancelAccepted, accepted...)
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "release", Arguments: map[string]any{"key": "g"}}); err != nil {
		t.Fatal(err)
	}
	if late {
		sc.events.waitFor(t, events.Suppressed, "kind", "response")
	}
	select {
	case <-progressed:
		t.Error("progress reached the client after its cancel")
	default:
	}
}

// TestE2EStdioClientToGoSDKSSEServer: the go-sdk's HTTP+SSE server handler
// (the example server, --sse) behind the bridge, in a process of its own:
// a server-to-client request (sampling) travels on the upstream's event
// stream to the client and its answer back as a POST; then the upstream
// dies mid-call, its stream drops, and the call in flight gets the proxy's
// error at once, and the bridge ends saying so (exit 1).
func TestE2EStdioClientToGoSDKSSEServer(t *testing.T) {
	t.Parallel()
	up := freePort(t)
	srv := exec.Command(proxyBin, "example-server", "--sse", up)
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	waitListening(t, up)
	w := startWrapped(t, "--log-level", "debug", "--upstream", "http://"+up+"/sse")
	w.initialize(`{"sampling":{}}`)
	w.events.waitFor(t, events.UpstreamDetected, "transport", "sse")

	w.send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"ask_sampling"}}`)
	got := w.recvUntil(func(m map[string]any) bool { return m["method"] == "sampling/createMessage" })
	id, _ := json.Marshal(got[len(got)-1]["id"])
	w.send(`{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"role":"assistant","content":{"type":"text","text":"hi"},"model":"e2e-model"}}`)
	res := w.recvUntil(isResponse(5))
	if b, _ := json.Marshal(res[len(res)-1]); !strings.Contains(string(b), "sampled by e2e-model") {
		t.Errorf("ask_sampling answered %s, want the sampled result", b)
	}

	w.send(`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"block","arguments":{"key":"d"},"_meta":{"progressToken":"t6"}}}`)
	w.recvUntil(func(m map[string]any) bool { return concerns(m, "none", "t6") })
	srv.Process.Kill() // the upstream dies mid-call: its event stream drops
	srv.Wait()
	res = w.recvUntil(isResponse(6))
	// The proxy's error: -32000, the stream broke; or -32603, when the
	// server died before answering the POST that carried the call (the
	// go-sdk handler may send the call's progress on the stream before it
	// answers that POST), which the proxy sees first.
	errObj, _ := res[len(res)-1]["error"].(map[string]any)
	data, _ := errObj["data"].(map[string]any)
	if code := errObj["code"]; (code != float64(-32000) && code != float64(-32603)) || data["proxy"] != "mcp-cancel-proxy" {
		t.Errorf("the call in flight got %v, want the proxy's -32000 or -32603 error", res[len(res)-1])
	}
	if code := w.wait(); code != 1 {
		t.Errorf("bridge exit status %d after the upstream died, want 1", code)
	}
}

// blockAndCancel calls the example server's block tool (key "g") through
// cs with progress token tok, and cancels the call once progress comes
// (started receives or closes), after calling before: the call must end
// with context.Canceled.
func blockAndCancel(t *testing.T, cs *mcp.ClientSession, tok string, started <-chan struct{}, before func()) {
	t.Helper()
	callCtx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		p := &mcp.CallToolParams{Name: "block", Arguments: map[string]any{"key": "g"}}
		p.SetProgressToken(tok)
		_, err := cs.CallTool(callCtx, p)
		errc <- err
	}()
	<-started
	before()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("CallTool after cancel = %v, want context.Canceled", err)
	}
}

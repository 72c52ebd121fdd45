//go:build unix

package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// watchedConfig: deadlines that progress pushes back, for calls that
// carry no progress token. slow_honour's steps (100 ms) are far inside
// its 2 s timeout, and the call's 3 s beyond it; block reports progress
// once and then waits, quiet.
const watchedConfig = `
policy:
  rules:
    - tool: slow_honour
      timeout: 2s
      max_timeout: 60s
      reset_on_progress: true
    - tool: block
      timeout: 300ms
      reset_on_progress: true
`

// watchedCall is a slow_honour call without a progress token that takes
// 3 s, past its rule's 2 s timeout, reporting progress every 100 ms.
const watchedCall = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow_honour","arguments":{"seconds":3,"steps":30}}}`

// TestE2EProgressTheClientNeverAskedFor: the go-sdk example server reports
// progress only under a token it was given, and the client gives none. With
// reset_on_progress the proxy gives one of its own: a call that reports
// progress runs past its timeout to its answer; one that goes quiet is
// cancelled on the server (which says so) at the deadline after its last
// progress; and no progress reaches the client. On the wrapper, the bridge
// and the sidecar in front of a Streamable HTTP server.
func TestE2EProgressTheClientNeverAskedFor(t *testing.T) {
	t.Parallel()
	cfg, _ := writeConfig(t, watchedConfig)
	t.Run("wrapper", func(t *testing.T) {
		t.Parallel()
		w := startWrapped(t, "--config", cfg, "--log-level", "debug", "--", proxyBin, "example-server")
		watchedOverStdio(t, w, w.logs)
	})
	t.Run("bridge", func(t *testing.T) {
		t.Parallel()
		up := freePort(t)
		logs := startServer(t, exec.Command(proxyBin, "example-server", "--http", up))
		waitListening(t, up)
		w := startWrapped(t, "--config", cfg, "--log-level", "debug", "--upstream", "http://"+up+"/mcp")
		watchedOverStdio(t, w, logs)
	})
	t.Run("sidecar", func(t *testing.T) {
		t.Parallel()
		run := startSidecarSession(t, nil, "--config", cfg, "--log-level", "debug")
		checkWatchedAnswer(t, postMessages(t, mcpPost(t, run.url, run.session, watchedCall)))
		quiet := mcpPost(t, run.url, run.session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"block","arguments":{"key":"q"}}}`)
		checkQuietAnswer(t, postMessages(t, quiet), run.server)
		rel := mcpPost(t, run.url, run.session, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"release","arguments":{"key":"q"}}}`)
		io.Copy(io.Discard, rel.Body)
		rel.Body.Close()
		run.sc.events.waitFor(t, events.DeadlinePassed, "id", "2")
	})
}

// watchedOverStdio plays TestE2EProgressTheClientNeverAskedFor's calls as
// a stdio client of w, whose server writes its stderr to server.
func watchedOverStdio(t *testing.T, w *wrapped, server *logTail) {
	w.initialize(`{}`)
	w.send(watchedCall)
	checkWatchedAnswer(t, frames(w.recvUntil(isResponse(1))))
	w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"block","arguments":{"key":"q"}}}`)
	checkQuietAnswer(t, frames(w.recvUntil(isResponse(2))), server)
	w.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"release","arguments":{"key":"q"}}}`)
	w.send(`{"jsonrpc":"2.0","id":4,"method":"ping"}`)
	for _, m := range frames(w.recvUntil(isResponse(4))) {
		if strings.Contains(m, "notifications/progress") || strings.Contains(m, `"id":2,`) {
			t.Errorf("after the deadline the client got %s", m)
		}
	}
	w.events.waitFor(t, events.DeadlinePassed, "id", "2")
}

// postMessages returns the messages of a POST's response, an event stream
// or one JSON body.
func postMessages(t *testing.T, resp *http.Response) []string {
	t.Helper()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		return []string{string(b)}
	}
	var got []string
	for m := range sseMessages(resp) {
		got = append(got, m)
	}
	return got
}

// frames renders what a stdio client got as JSON text.
func frames(ms []map[string]any) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		b, _ := json.Marshal(m)
		out[i] = string(b)
	}
	return out
}

// checkWatchedAnswer checks what the client got of watchedCall: the
// server's answer, after no progress.
func checkWatchedAnswer(t *testing.T, got []string) {
	t.Helper()
	for _, m := range got {
		if strings.Contains(m, "notifications/progress") {
			t.Errorf("the client, which asked for no progress, got %s", m)
		}
	}
	if len(got) == 0 || !strings.Contains(got[len(got)-1], `"status":"done"`) {
		t.Errorf("the call that reports progress past its timeout ended with %q, want the server's answer", got)
	}
}

// checkQuietAnswer checks what the client got of the quiet block call: the
// proxy's deadline error, after no progress; and that the server was told.
func checkQuietAnswer(t *testing.T, got []string, server *logTail) {
	t.Helper()
	if len(got) != 1 || !strings.Contains(got[0], `"code":-32001`) || !strings.Contains(got[0], `"timeout":"300ms"`) {
		t.Errorf("the quiet call got %q, want the proxy's deadline error alone", got)
	}
	server.waitFor(t, "block q: the request was cancelled")
}

// TestE2EProgressTheClientNeverAskedForServerEverything: the same with
// server-everything (TypeScript SDK), whose long-running operation reports
// progress only under a token it was given: with the proxy's own, a call of
// 2 s runs past its 1 s timeout to its answer, and one of 6 s ends at its
// rule's max_timeout of 3 s, with the proxy's deadline error; the client
// sees no progress of either.
func TestE2EProgressTheClientNeverAskedForServerEverything(t *testing.T) {
	t.Parallel()
	node, dir := nodePeers(t)
	everything := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	cfg, _ := writeConfig(t, `
policy:
  rules:
    - tool: trigger-long-running-operation
      timeout: 1s
      max_timeout: 3s
      reset_on_progress: true
`)
	w := startWrapped(t, "--config", cfg, "--log-level", "debug", "--", node, everything, "stdio")
	w.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`)
	w.recvUntil(isResponse("init"))
	w.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	w.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"trigger-long-running-operation","arguments":{"duration":2,"steps":20}}}`)
	w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"trigger-long-running-operation","arguments":{"duration":6,"steps":60}}}`)
	answers := map[any]string{}
	for len(answers) < 2 {
		m := w.recv()
		b, _ := json.Marshal(m)
		if m["method"] == "notifications/progress" {
			t.Errorf("the client, which asked for no progress, got %s", b)
		}
		if isResponse(1)(m) || isResponse(2)(m) {
			answers[m["id"]] = string(b)
		}
	}
	first, second := answers[float64(1)], answers[float64(2)]
	if !strings.Contains(first, "Long running operation completed") {
		t.Errorf("the 2 s call, past its 1 s timeout with progress: %s, want its answer", first)
	}
	if !strings.Contains(second, `"code":-32001`) {
		t.Errorf("the 6 s call, past its 3 s max_timeout: %s, want the proxy's deadline error", second)
	}
	w.events.waitFor(t, events.DeadlinePassed, "id", "2")
}

//go:build unix

package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// clientTimeoutConfig runs client_timeout: auto, with Codex's wait of 5
// minutes cut to 400ms and a grace of 100ms, so that the test waits half
// a second, not five and a half minutes; Claude Code keeps the bundled
// table's row (it cancels). The block tool's on_timeout hook saves its
// event; slow_ignore's deadline of 1s is the witness that the proxy's
// timers have run past the budget.
const clientTimeoutConfig = `
policy:
  defaults:
    client_timeout: auto
  client_timeouts:
    grace: 100ms
    clients:
      - name: codex-mcp-client
        waits: 400ms
        source: the bundled row's 5m, cut for the test
  rules:
    - tool: block
      on_timeout:
        exec: ["sh", "-c", "cat > $DIR/timeout.json"]
    - tool: slow_ignore
      timeout: 1s
`

// initializeAs initializes the wrapped session as the client named.
func (w *wrapped) initializeAs(name, version string) {
	w.t.Helper()
	w.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"` +
		name + `","title":"x","version":"` + version + `"}}}`)
	w.recvUntil(isResponse("init"))
	w.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
}

// TestE2EClientTimeoutCodexStdio: a client that names itself as Codex
// does and never cancels: its call of a server that runs on is cancelled
// on the server once the client's budget has passed, not before; the
// on_timeout hook runs, the client gets the error that says why, and
// nothing more of the call reaches it.
func TestE2EClientTimeoutCodexStdio(t *testing.T) {
	t.Parallel()
	cfg, dir := writeConfig(t, clientTimeoutConfig)
	w := startWrapped(t, "--config", cfg, "--", proxyBin, "example-server")
	w.initializeAs("codex-mcp-client", "0.150.0")
	w.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"block","arguments":{"key":"ct"},"_meta":{"progressToken":"p"}}}`)
	got := w.recvUntil(isResponse(1))
	e, _ := got[len(got)-1]["error"].(map[string]any)
	data, _ := e["data"].(map[string]any)
	if e == nil || e["code"] != float64(-32001) || data["reason"] != "client_timeout" || data["timeout"] != "500ms" {
		t.Fatalf("answer at the client's timeout: %v", got[len(got)-1])
	}
	w.logs.waitFor(t, "example server: block ct: the request was cancelled")
	w.events.waitFor(t, events.ClientTimeoutPassed, "client", "codex-mcp-client 0.150.0")
	w.events.waitFor(t, events.HookRan, "phase", "on_timeout")
	if ev := readEvent(t, filepath.Join(dir, "timeout.json")); ev["source"] != "client_timeout" || ev["tool"] != "block" {
		t.Errorf("on_timeout event: %v", ev)
	}
	w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"release","arguments":{"key":"ct"}}}`)
	w.send(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	for _, m := range w.recvUntil(isResponse(3)) {
		if concerns(m, 1, "p") {
			t.Errorf("the client got %v after the call ended", m)
		}
	}
	rec := auditLine(t, w.logs, "1", "upstream notified; answered after the cancel (suppressed)")
	started, _ := time.Parse(time.RFC3339Nano, rec["started"].(string))
	cancelled, _ := time.Parse(time.RFC3339Nano, rec["cancelled"].(string))
	if rec["source"] != "client_timeout" || cancelled.Sub(started) < 500*time.Millisecond {
		t.Errorf("audit line: cancelled %v after it started, want at least the budget of 500ms: %v", cancelled.Sub(started), rec)
	}
}

// TestE2EClientTimeoutClaudeCodeStdio: a client that names itself as
// Claude Code does cancels what it gives up on: auto never times its
// calls. Its call is still running upstream after a deadline of 1s on
// another call has fired, twice the budget a Codex client would get.
func TestE2EClientTimeoutClaudeCodeStdio(t *testing.T) {
	t.Parallel()
	cfg, _ := writeConfig(t, clientTimeoutConfig)
	w := startWrapped(t, "--config", cfg, "--", proxyBin, "example-server")
	w.initializeAs("claude-code", "2.1.300")
	w.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"block","arguments":{"key":"cc"}}}`)
	w.logs.waitFor(t, "example server: block cc: started")
	w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow_ignore","arguments":{"seconds":30}}}`)
	for _, m := range w.recvUntil(isResponse(2)) { // at its deadline of 1s
		if isResponse(1)(m) {
			t.Fatalf("the call was ended before its answer: %v", m)
		}
	}
	w.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"release","arguments":{"key":"cc"}}}`)
	got := w.recvUntil(isResponse(1))
	if res, _ := got[len(got)-1]["result"].(map[string]any); res == nil {
		t.Errorf("the call's answer: %v", got[len(got)-1])
	}
	if strings.Contains(w.logs.all(), "block cc: the request was cancelled") || w.events.count(events.ClientTimeoutPassed) != 0 {
		t.Errorf("the call was cancelled:\n%s", w.logs.all())
	}
}

// TestE2EClientTimeoutCodexSidecar: the same Codex client over the
// sidecar, in front of a Streamable HTTP server: its call is cancelled on
// the server at the budget, and the error reaches its POST's stream;
// /metrics counts it, by source and by how its budget was set.
func TestE2EClientTimeoutCodexSidecar(t *testing.T) {
	t.Parallel()
	cfg, _ := writeConfig(t, clientTimeoutConfig)
	adm := freePort(t)
	run := startSidecarAs(t, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"codex-mcp-client","version":"0.150.0"}}}`,
		nil, "--config", cfg, "--admin", adm)
	sc, server, url, session := run.sc, run.server, run.url, run.session
	resp := mcpPost(t, url, session, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"block","arguments":{"key":"hs"}}}`)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"reason":"client_timeout"`) || !strings.Contains(string(body), `"timeout":"500ms"`) {
		t.Errorf("the call's stream: %s", body)
	}
	server.waitFor(t, "example server: block hs: the request was cancelled")
	sc.events.waitFor(t, events.ClientTimeoutPassed, "client", "codex-mcp-client 0.150.0")
	waitMetric(t, adm, `mcp_cancel_proxy_cancels_total{source="client_timeout"}`, 1)
	if v := metricValue(t, adm, `mcp_cancel_proxy_client_timeouts_total{budget="auto"}`); v != 1 {
		t.Errorf("client_timeouts_total{budget=auto}: %v", v)
	}
	mcpPost(t, url, session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"release","arguments":{"key":"hs"}}}`).Body.Close()
}

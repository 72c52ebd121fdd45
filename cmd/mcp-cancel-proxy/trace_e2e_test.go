//go:build unix

package main

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/otlptest"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// traceConfig traces to the receiver at url, and runs a cancel hook that
// fails its first attempt and writes the trace context it got.
const traceConfig = `
tracing:
  endpoint: URL
policy:
  late_window: 2s
  rules:
    - tool: block
      correlate:
        run_id: /_meta/runId
      capture:
        job_id: /_meta/jobId
      on_cancel:
        exec: ["sh", "-c", "echo $TRACEPARENT > $DIR/traceparent; [ -e $DIR/once ] && exit 0; touch $DIR/once; exit 3"]
        retries: 1
        backoff: 10ms
`

// tracedEnv is the proxy's environment: spans exported every 50 ms.
func tracedEnv() []string { return append(os.Environ(), "OTEL_BSP_SCHEDULE_DELAY=50") }

// serverSawProxySpan reads, from the example server's log line for a
// block call, the traceparent it got, checks it continues the client's
// trace, and returns its span id: the proxy's.
func serverSawProxySpan(t *testing.T, line string) string {
	t.Helper()
	m := regexp.MustCompile(`traceparent 00-([0-9a-f]{32})-([0-9a-f]{16})-01`).FindStringSubmatch(line)
	if m == nil || m[1] != otlptest.ClientTrace || m[2] == otlptest.ClientSpan {
		t.Fatalf("the server got no trace context continuing the client's: %s", line)
	}
	return m[2]
}

// checkCallTrace checks the spans of a cancelled block call, whose span the
// server saw as proxySpan: one trace from the client's span through the
// proxy's (with the events and the audit line's status) to the hook's
// attempts, its children.
func checkCallTrace(t *testing.T, rcv *otlptest.Receiver, proxySpan, transport, dir, status string, events ...string) {
	t.Helper()
	call := rcv.Wait(t, 20*time.Second, "tools/call block", func(s otlptest.Span) bool { return s.Name == "tools/call block" })
	if call.TraceID != otlptest.ClientTrace || call.ParentID != otlptest.ClientSpan || call.SpanID != proxySpan {
		t.Errorf("call span: trace %s parent %s id %s, want %s %s %s", call.TraceID, call.ParentID, call.SpanID, otlptest.ClientTrace, otlptest.ClientSpan, proxySpan)
	}
	for _, ev := range events {
		if !call.HasEvent(ev) {
			t.Errorf("call span lacks the event %q: %+v", ev, call.Events)
		}
	}
	want := map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "block", "network.transport": transport,
		proxy.AttrOutcome: status, proxy.AttrSource: "client",
		"mcp_cancel_proxy.correlation.run_id": "run-88", "mcp_cancel_proxy.captured.job_id": "job-5"}
	for k, v := range want {
		if call.Attrs[k] != v {
			t.Errorf("call span: %s = %q, want %q", k, call.Attrs[k], v)
		}
	}
	if call.Error {
		t.Errorf("call span is an error: %q", call.Status)
	}
	var attempts []otlptest.Span
	for i := 1; i <= 2; i++ {
		attempts = append(attempts, rcv.Wait(t, 20*time.Second, "hook attempt", func(s otlptest.Span) bool {
			return s.Name == "hook on_cancel" && s.Attrs["mcp_cancel_proxy.hook.attempt"] == string(rune('0'+i))
		}))
	}
	for _, a := range attempts {
		if a.TraceID != otlptest.ClientTrace || a.ParentID != proxySpan || a.Attrs["mcp_cancel_proxy.hook.idempotency_key"] == "" {
			t.Errorf("hook attempt span: trace %s parent %s attrs %v", a.TraceID, a.ParentID, a.Attrs)
		}
	}
	if !attempts[0].Error || attempts[1].Error || attempts[0].Attrs["mcp_cancel_proxy.hook.idempotency_key"] != attempts[1].Attrs["mcp_cancel_proxy.hook.idempotency_key"] {
		t.Errorf("hook attempts: first error %v, second error %v, keys %v", attempts[0].Error, attempts[1].Error, attempts)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "traceparent"))
	if strings.TrimSpace(string(got)) != "00-"+otlptest.ClientTrace+"-"+attempts[1].SpanID+"-01" {
		t.Errorf("the hook got TRACEPARENT=%q; its attempt's span is %s", got, attempts[1].SpanID)
	}
	for _, s := range rcv.Spans() {
		for k, v := range s.Attrs {
			if strings.Contains(v, "s3cret") {
				t.Errorf("span %s: %s holds the token", s.Name, k)
			}
		}
	}
}

// TestE2ETraceWrapper follows a cancelled call through the stdio wrapper
// to a real OTLP/HTTP receiver: the client's traceparent in _meta is
// continued, the server receives the proxy's span as its parent, and the
// proxy's span has the cancel's events, the audit's outcome, the three
// kinds of ids apart, and the hook's attempts as children.
func TestE2ETraceWrapper(t *testing.T) {
	t.Parallel()
	rcv := otlptest.StartHTTP(t)
	cfg, dir := writeConfig(t, strings.Replace(traceConfig, "URL", rcv.URL, 1))
	cmd := exec.Command(proxyBin, "--config", cfg, "--", proxyBin, "example-server")
	cmd.Env = tracedEnv()
	w := startCommand(t, cmd)
	w.initialize(`{}`)
	w.send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"block","arguments":{"key":"job-5"},"_meta":{"progressToken":"p","runId":"run-88","authToken":"s3cret","traceparent":"` + otlptest.ClientTraceParent + `"}}}`)
	w.recvUntil(func(m map[string]any) bool { return concerns(m, 4, "p") })
	proxySpan := serverSawProxySpan(t, w.logs.waitFor(t, "block job-5: started"))
	w.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4}}`)
	w.events.waitFor(t, events.HookRan)
	w.send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"release","arguments":{"key":"job-5"}}}`)
	w.recvUntil(isResponse(5))
	if rec := auditLine(t, w.logs, "4", "upstream notified; answered after the cancel (suppressed)"); rec["trace_id"] != otlptest.ClientTrace {
		t.Errorf("audit line's trace_id %v, want the client's trace", rec["trace_id"])
	}
	w.stdin.Close()
	<-w.exited
	checkCallTrace(t, rcv, proxySpan, "pipe", dir, "upstream notified; answered after the cancel (suppressed)",
		proxy.EventCancelAccepted, proxy.EventCancelForwarded, proxy.EventLateSuppressed)
	release := rcv.Wait(t, 5*time.Second, "tools/call release", func(s otlptest.Span) bool { return s.Name == "tools/call release" })
	if release.ParentID != "" || release.Attrs[proxy.AttrOutcome] != "answered" || release.Attrs["jsonrpc.request.id"] != "5" {
		t.Errorf("an untraced call starts a trace of its own: parent %q attrs %v", release.ParentID, release.Attrs)
	}
}

// TestE2ETraceSidecar follows a cancelled call through the sidecar: the
// client's traceparent comes as an HTTP header, the upstream gets the
// proxy's in _meta, and the MCP operation duration is in /metrics.
func TestE2ETraceSidecar(t *testing.T) {
	t.Parallel()
	rcv := otlptest.StartHTTP(t)
	cfg, dir := writeConfig(t, strings.Replace(traceConfig, "URL", rcv.URL, 1))
	adm := freePort(t)
	run := startSidecarSession(t, tracedEnv(), "--config", cfg, "--admin", adm, "--cancel-grace", "100ms")
	sc, url, session, server := run.sc, run.url, run.session, run.server

	req := mcpRequest(url, session, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"block","arguments":{"key":"job-5"},"_meta":{"progressToken":"p","runId":"run-88","authToken":"s3cret"}}}`)
	req.Header.Set("Traceparent", otlptest.ClientTraceParent)
	call, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	msgs := sseMessages(call)
	if first := <-msgs; !strings.Contains(first, "notifications/progress") {
		t.Fatalf("first message %s, want progress", first)
	}
	proxySpan := serverSawProxySpan(t, server.waitFor(t, "block job-5: started"))
	mcpPost(t, url, session, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4}}`).Body.Close()
	sc.events.waitFor(t, events.HookRan)
	for range msgs { // the stream ends after the grace
	}
	rel := mcpPost(t, url, session, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"release","arguments":{"key":"job-5"}}}`)
	io.Copy(io.Discard, rel.Body)
	rel.Body.Close()
	// Without a late hook the sidecar stops reading the call's stream after
	// the grace: the late answer is never seen.
	if rec := auditLine(t, sc.logs, "4", "upstream notified; compensating hook ran"); rec["trace_id"] != otlptest.ClientTrace {
		t.Errorf("audit line's trace_id %v, want the client's trace", rec["trace_id"])
	}
	metrics, err := http.Get("http://" + adm + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(metrics.Body)
	metrics.Body.Close()
	for _, want := range []string{
		`mcp_server_operation_duration_seconds_count{error_type="cancelled",gen_ai_tool_name="block",mcp_method_name="tools/call",mcp_protocol_version="2025-06-18",network_transport="tcp"} 1`,
		`mcp_server_operation_duration_seconds_count{error_type="",gen_ai_tool_name="release",mcp_method_name="tools/call",mcp_protocol_version="2025-06-18",network_transport="tcp"} 1`,
	} {
		if !strings.Contains(string(text), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	sc.cmd.Process.Signal(syscall.SIGTERM)
	<-sc.exited
	checkCallTrace(t, rcv, proxySpan, "tcp", dir, "upstream notified; compensating hook ran",
		proxy.EventCancelAccepted, proxy.EventCancelForwarded)
}

// TestE2ETraceHeaderToStdioServer: a stdio server behind the sidecar: a
// POST's traceparent header (and no trace context in _meta) is continued,
// as on the relay: the server gets the proxy's span, in the client's trace
// (each span was a new trace).
func TestE2ETraceHeaderToStdioServer(t *testing.T) {
	t.Parallel()
	rcv := otlptest.StartHTTP(t)
	cfg, _ := writeConfig(t, "tracing:\n  endpoint: "+rcv.URL+"\n")
	front := freePort(t)
	cmd := exec.Command(proxyBin, "--config", cfg, "--listen", front, "--log-level", "debug", "--", proxyBin, "example-server")
	cmd.Env = tracedEnv()
	sc := startCommand(t, cmd)
	t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
	sc.events.waitFor(t, events.SidecarListening)
	url := "http://" + front + "/mcp"
	resp := mcpPost(t, url, "", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"p","version":"1"}}}`)
	session := resp.Header.Get("Mcp-Session-Id")
	<-sseMessages(resp)
	mcpPost(t, url, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()
	req := mcpRequest(url, session, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"block","arguments":{"key":"tr"},"_meta":{"progressToken":"p"}}}`)
	req.Header.Set("Traceparent", otlptest.ClientTraceParent)
	call, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer call.Body.Close()
	<-sseMessages(call)
	serverSawProxySpan(t, sc.logs.waitFor(t, "block tr: started"))
	rel := mcpPost(t, url, session, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"release","arguments":{"key":"tr"}}}`)
	io.Copy(io.Discard, rel.Body)
	rel.Body.Close()
}

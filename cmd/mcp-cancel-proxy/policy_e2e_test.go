//go:build unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// writeConfig writes a configuration file into a fresh directory; $DIR in
// text becomes that directory.
func writeConfig(t *testing.T, text string) (path, dir string) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(text, "$DIR", dir)), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, dir
}

// sidecarRun is a sidecar in front of the example server over HTTP, with
// a session open.
type sidecarRun struct {
	sc           *wrapped
	url, session string
	server       *logTail // the example server's stderr
}

// startSidecarSession starts the example server over HTTP and a sidecar in
// front of it, with args (and env as its environment, if not nil), and
// opens a session (protocol 2025-06-18).
func startSidecarSession(t *testing.T, env []string, args ...string) sidecarRun {
	t.Helper()
	return startSidecarAs(t, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"p","version":"1"}}}`,
		env, args...)
}

// startSidecarAs is startSidecarSession whose session begins with the
// client's initialize.
func startSidecarAs(t *testing.T, initialize string, env []string, args ...string) sidecarRun {
	t.Helper()
	up, front := freePort(t), freePort(t)
	run := sidecarRun{server: startServer(t, exec.Command(proxyBin, "example-server", "--http", up)), url: "http://" + front + "/mcp"}
	cmd := exec.Command(proxyBin, append(args, "--listen", front, "--upstream", "http://"+up+"/mcp")...)
	cmd.Env = env
	run.sc = startCommand(t, cmd)
	t.Cleanup(func() { run.sc.cmd.Process.Signal(syscall.SIGTERM) })
	waitListening(t, up)
	run.sc.events.waitFor(t, events.SidecarListening)
	resp := mcpPost(t, run.url, "", initialize)
	run.session = resp.Header.Get("Mcp-Session-Id")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	mcpPost(t, run.url, run.session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()
	return run
}

// auditLine finds the audit line (on stderr) of request id with status.
func auditLine(t *testing.T, logs *logTail, id, status string) map[string]any {
	t.Helper()
	line := logs.waitFor(t, `"id":`+id+`,`, `"status":"`+status+`"`)
	var rec map[string]any
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatalf("audit line %q: %v", line, err)
	}
	return rec
}

// readEvent reads a hook's event document that the hook saved.
func readEvent(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ev map[string]any
	if err := json.Unmarshal(data, &ev); err != nil {
		t.Fatalf("hook event %s: %v", data, err)
	}
	return ev
}

const hookConfig = `
policy:
  rules:
    - tool: block
      interruptible: false
      capture:
        job_id: [/_meta/jobId, /structuredContent/jobId]
      on_cancel:
        exec: ["sh", "-c", "cat > $DIR/cancel.json"]
      on_late_result:
        exec: ["sh", "-c", "cat > $DIR/late.json"]
`

// TestE2EPolicyHooksStdio: a go-sdk server's tool ignores the cancel and
// reports its job id in progress. The on_cancel hook gets the job id; the
// late result, which the client never sees, goes to on_late_result; the
// audit line tells the whole story.
func TestE2EPolicyHooksStdio(t *testing.T) {
	t.Parallel()
	cfg, dir := writeConfig(t, hookConfig)
	w := startWrapped(t, "--config", cfg, "--log-level", "debug", "--", proxyBin, "example-server")
	w.initialize(`{}`)
	w.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"block","arguments":{"key":"job-7"},"_meta":{"progressToken":"p"}}}`)
	w.recvUntil(func(m map[string]any) bool { return concerns(m, 1, "p") })
	w.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"user pressed stop"}}`)
	w.events.waitFor(t, events.HookRan, "phase", "on_cancel")
	w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"release","arguments":{"key":"job-7"}}}`)
	w.send(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	for _, m := range w.recvUntil(isResponse(3)) {
		if concerns(m, 1, "p") {
			t.Errorf("the client got %v after its cancel", m)
		}
	}
	rec := auditLine(t, w.logs, "1", "late result compensated")
	if rec["source"] != "client" || rec["reason"] != "user pressed stop" || rec["tool"] != "block" ||
		rec["dispatched"] != true || rec["upstream_notified"] != true || rec["late_response"] == nil {
		t.Errorf("audit line: %v", rec)
	}
	if c, _ := rec["captured"].(map[string]any); c["job_id"] != "job-7" {
		t.Errorf("captured: %v", rec["captured"])
	}
	cancelEv := readEvent(t, filepath.Join(dir, "cancel.json"))
	if c, _ := cancelEv["captured"].(map[string]any); c["job_id"] != "job-7" || cancelEv["event"] != "cancel" {
		t.Errorf("on_cancel event: %v", cancelEv)
	}
	late := readEvent(t, filepath.Join(dir, "late.json"))
	res, _ := late["result"].(map[string]any)
	if sc, _ := res["structuredContent"].(map[string]any); late["event"] != "late_result" || sc["jobId"] != "job-7" {
		t.Errorf("on_late_result event: %v", late)
	}
}

// TestE2EDeadlineStdio: a tool past its deadline is cancelled on the
// server, the client gets the proxy's timeout error, and the late result
// never reaches it.
func TestE2EDeadlineStdio(t *testing.T) {
	t.Parallel()
	cfg, _ := writeConfig(t, "policy:\n  rules:\n    - tool: block\n      timeout: 300ms\n")
	w := startWrapped(t, "--config", cfg, "--log-level", "debug", "--", proxyBin, "example-server")
	w.initialize(`{}`)
	w.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"block","arguments":{"key":"d"}}}`)
	got := w.recvUntil(isResponse(1))
	e, _ := got[len(got)-1]["error"].(map[string]any)
	data, _ := e["data"].(map[string]any)
	if e == nil || e["code"] != float64(-32001) || data["proxy"] != "mcp-cancel-proxy" || data["timeout"] != "300ms" {
		t.Fatalf("answer at the deadline: %v", got[len(got)-1])
	}
	w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"release","arguments":{"key":"d"}}}`)
	w.send(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	for _, m := range w.recvUntil(isResponse(3)) {
		if isResponse(1)(m) {
			t.Errorf("a second answer to 1 reached the client: %v", m)
		}
	}
	rec := auditLine(t, w.logs, "1", "upstream notified; answered after the cancel (suppressed)")
	if rec["source"] != "deadline" {
		t.Errorf("audit line: %v", rec)
	}
}

// lateAfterDeadline is a policy whose deadline passes while the example
// server's block waits for its release, whose late result goes to the
// on_late_result hook.
const lateAfterDeadline = `
policy:
  rules:
    - tool: block
      timeout: 300ms
      on_late_result:
        exec: ["sh", "-c", "cat > $DIR/late.json"]
`

// TestE2ELateResultAfterADeadline: a call past its deadline gets the
// proxy's timeout error, and the server's result that comes after it
// reaches the on_late_result hook, never the client: through the wrapper,
// the bridge and the sidecar over each kind of server (Streamable HTTP,
// HTTP+SSE, a stdio child).
func TestE2ELateResultAfterADeadline(t *testing.T) {
	t.Parallel()
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"block","arguments":{"key":"d"}}}`
	release := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"release","arguments":{"key":"d"}}}`
	checkLate := func(t *testing.T, logs *logTail, dir string) {
		t.Helper()
		logs.waitFor(t, `"tool":"block"`, `"status":"late result compensated"`) // its audit line, whatever the client numbered it
		if ev := readEvent(t, filepath.Join(dir, "late.json")); ev["event"] != "late_result" {
			t.Errorf("on_late_result event: %v", ev)
		}
	}
	for _, via := range []string{"wrapper", "bridge"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			cfg, dir := writeConfig(t, lateAfterDeadline)
			args := []string{"--config", cfg, "--log-level", "debug", "--", proxyBin, "example-server"}
			if via == "bridge" {
				up := freePort(t)
				startBackground(t, proxyBin, "example-server", "--http", up)
				waitListening(t, up)
				args = []string{"--config", cfg, "--log-level", "debug", "--upstream", "http://" + up + "/mcp"}
			}
			w := startWrapped(t, args...)
			w.initialize(`{}`)
			w.send(call)
			got := w.recvUntil(isResponse(1))
			if e, _ := got[len(got)-1]["error"].(map[string]any); e == nil || e["code"] != float64(-32001) {
				t.Fatalf("answer at the deadline: %v", got[len(got)-1])
			}
			w.send(release)
			w.send(`{"jsonrpc":"2.0","id":3,"method":"ping"}`)
			for _, m := range w.recvUntil(isResponse(3)) {
				if isResponse(1)(m) {
					t.Errorf("a second answer to 1 reached the client: %v", m)
				}
			}
			checkLate(t, w.logs, dir)
		})
	}
	for _, upstream := range []string{"streamable", "sse", "stdio"} { // the sidecar, over each kind of server
		t.Run("sidecar-"+upstream, func(t *testing.T) {
			t.Parallel()
			cfg, dir := writeConfig(t, lateAfterDeadline)
			front := freePort(t)
			args := []string{"--config", cfg, "--log-level", "debug", "--listen", front}
			switch upstream {
			case "streamable", "sse":
				up := freePort(t)
				startBackground(t, proxyBin, "example-server", "--"+map[string]string{"streamable": "http", "sse": "sse"}[upstream], up)
				waitListening(t, up)
				args = append(args, "--upstream", "http://"+up+map[string]string{"streamable": "/mcp", "sse": "/sse"}[upstream])
			case "stdio":
				args = append(args, "--", proxyBin, "example-server")
			}
			sc := startWrapped(t, args...)
			t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
			sc.events.waitFor(t, events.SidecarListening)
			url := "http://" + front + "/mcp"
			resp := mcpPost(t, url, "", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"p","version":"1"}}}`)
			session := resp.Header.Get("Mcp-Session-Id")
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			mcpPost(t, url, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()
			resp = mcpPost(t, url, session, call)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(body), `"id":1`) || !strings.Contains(string(body), `"code":-32001`) {
				t.Fatalf("answer at the deadline: %s", body)
			}
			rel := mcpPost(t, url, session, release)
			io.Copy(io.Discard, rel.Body)
			rel.Body.Close()
			checkLate(t, sc.logs, dir)
		})
	}
	t.Run("legacy-client", func(t *testing.T) { // an old HTTP+SSE client, the go-sdk's, through the sidecar
		t.Parallel()
		cfg, dir := writeConfig(t, lateAfterDeadline)
		up, front := freePort(t), freePort(t)
		startBackground(t, proxyBin, "example-server", "--http", up)
		waitListening(t, up)
		sc := startWrapped(t, "--config", cfg, "--log-level", "debug", "--listen", front, "--upstream", "http://"+up+"/mcp")
		t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
		sc.events.waitFor(t, events.SidecarListening)
		ctx := context.Background()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "legacy", Version: "1"}, nil).Connect(ctx, &mcp.SSEClientTransport{Endpoint: "http://" + front + "/sse"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "block", Arguments: map[string]any{"key": "d"}}); err == nil || !strings.Contains(err.Error(), "the proxy's deadline of 300ms passed") {
			t.Fatalf("answer at the deadline: %v, want the proxy's timeout error", err)
		}
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "release", Arguments: map[string]any{"key": "d"}}); err != nil {
			t.Fatal(err)
		}
		checkLate(t, sc.logs, dir)
	})
}

// TestE2EEscalateRestart: a server that ignores both the cancel and
// SIGTERM is restarted; the client's session goes on (a later call
// succeeds) and no process of the old server survives.
func TestE2EEscalateRestart(t *testing.T) {
	t.Parallel()
	cfg, _ := writeConfig(t, "policy:\n  restart_after: 200ms\n  late_window: 1s\n  rules:\n    - tool: block\n      escalate: restart\nchild:\n  term_after: 100ms\n  kill_after: 100ms\n")
	w := startWrapped(t, "--config", cfg, "--log-level", "debug", "--", proxyBin, "example-server", "--ignore-term")
	line := w.logs.waitFor(t, "example server pids: ")
	var pids []int
	for _, f := range strings.Fields(line[strings.Index(line, "pids: ")+6:]) {
		n, err := strconv.Atoi(strings.Trim(f, `"`))
		if err != nil {
			t.Fatalf("bad pid line %q", line)
		}
		pids = append(pids, n)
	}
	w.initialize(`{}`)
	w.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"block","arguments":{"key":"r"},"_meta":{"progressToken":"r"}}}`)
	w.recvUntil(func(m map[string]any) bool { return concerns(m, 1, "r") })
	w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"block","arguments":{"key":"other"}}}`)
	w.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
	// The other call in flight gets a clear error when the server goes.
	got := w.recvUntil(isResponse(2))
	if e, _ := got[len(got)-1]["error"].(map[string]any); e == nil || !strings.Contains(fmt.Sprint(e["message"]), "restarted") {
		t.Errorf("the other call's answer: %v", got[len(got)-1])
	}
	w.events.waitFor(t, events.ServerRestarted)
	w.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"slow_honour","arguments":{"seconds":0.01,"steps":1}}}`)
	got = w.recvUntil(isResponse(3))
	if got[len(got)-1]["result"] == nil {
		t.Errorf("a call after the restart: %v", got[len(got)-1])
	}
	w.events.waitFor(t, events.ServerSignalled, "signal", "SIGKILL")
	w.events.waitFor(t, events.ServerExited)
	for _, pid := range pids {
		if survives(pid) {
			t.Errorf("process %d of the old server survived", pid)
		}
	}
	if rec := auditLine(t, w.logs, "1", "upstream notified; stop not confirmed"); rec["server_restarted"] != true {
		t.Errorf("audit line: %v", rec)
	}
}

// TestE2ETaskCancelServerEverything: server-everything's task tool runs as
// a task; a cancel of a tasks/result call leaves the task running, and the
// client's cancel of the task-augmented call becomes the proxy's own
// tasks/cancel, so that the task ends cancelled.
func TestE2ETaskCancelServerEverything(t *testing.T) {
	t.Parallel()
	node, dir := nodePeers(t)
	everything := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	w := startWrapped(t, "--log-level", "debug", "--", node, everything, "stdio")
	w.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`)
	w.recvUntil(isResponse("init"))
	w.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	w.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"simulate-research-query","arguments":{"topic":"cancellation"},"task":{"ttl":60000}}}`)
	got := w.recvUntil(isResponse(1))
	res, _ := got[len(got)-1]["result"].(map[string]any)
	task, _ := res["task"].(map[string]any)
	taskID, _ := task["taskId"].(string)
	if taskID == "" {
		t.Fatalf("no task created: %v", got[len(got)-1])
	}
	status := func(id int) string {
		w.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tasks/get","params":{"taskId":%q}}`, id, taskID))
		got := w.recvUntil(isResponse(id))
		r, _ := got[len(got)-1]["result"].(map[string]any)
		return fmt.Sprint(r["status"])
	}
	// Waiting for the result, and giving up on waiting, is not cancelling.
	w.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tasks/result","params":{"taskId":%q}}`, taskID))
	w.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`)
	if s := status(3); s != "working" {
		t.Fatalf("after cancelling tasks/result the task is %q, want working", s)
	}
	w.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"user stop"}}`)
	rec := auditLine(t, w.logs, "1", "task cancelled")
	if rec["task_id"] != taskID || rec["task_cancel"] != "cancelled" {
		t.Errorf("audit line: %v", rec)
	}
	if s := status(4); s != "cancelled" {
		t.Errorf("after the cancel the task is %q, want cancelled", s)
	}
}

// TestE2EPolicyHooksSidecar: TestE2EPolicyHooksStdio through the HTTP
// sidecar, in front of the go-sdk example server over Streamable HTTP; and
// a deadline there, answered with the proxy's timeout error.
func TestE2EPolicyHooksSidecar(t *testing.T) {
	t.Parallel()
	cfg, dir := writeConfig(t, hookConfig+"    - tool: slow_ignore\n      timeout: 300ms\n  late_window: 1s\n")
	adm := freePort(t)
	run := startSidecarSession(t, nil, "--config", cfg, "--log-level", "debug", "--admin", adm, "--cancel-grace", "100ms")
	sc, url, session := run.sc, run.url, run.session

	call := mcpPost(t, url, session, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"block","arguments":{"key":"job-9"},"_meta":{"progressToken":"p"}}}`)
	msgs := sseMessages(call)
	if first := <-msgs; !strings.Contains(first, "notifications/progress") {
		t.Fatalf("first message %s, want progress", first)
	}
	mcpPost(t, url, session, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"stop"}}`).Body.Close()
	sc.events.waitFor(t, events.HookRan, "phase", "on_cancel")
	for m := range msgs { // the stream ends after the grace
		t.Errorf("after the cancel the client got %s", m)
	}
	// The tool finishes only now, after the client's stream has ended: the
	// sidecar still reads the upstream's stream, so the late result is seen.
	rel := mcpPost(t, url, session, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"release","arguments":{"key":"job-9"}}}`)
	io.Copy(io.Discard, rel.Body)
	rel.Body.Close()
	rec := auditLine(t, sc.logs, "1", "late result compensated")
	if c, _ := rec["captured"].(map[string]any); c["job_id"] != "job-9" || rec["source"] != "client" {
		t.Errorf("audit line: %v", rec)
	}
	if c, _ := readEvent(t, filepath.Join(dir, "cancel.json"))["captured"].(map[string]any); c["job_id"] != "job-9" {
		t.Errorf("on_cancel event's captured values: %v", c)
	}
	if ev := readEvent(t, filepath.Join(dir, "late.json")); ev["event"] != "late_result" {
		t.Errorf("on_late_result event: %v", ev)
	}

	// A deadline: the client gets the proxy's error (as JSON here: the
	// upstream had not even sent its response headers yet).
	slow := mcpPost(t, url, session, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"slow_ignore","arguments":{"seconds":3,"steps":3}}}`)
	body, _ := io.ReadAll(slow.Body)
	slow.Body.Close()
	if !strings.Contains(string(body), `"id":3`) || !strings.Contains(string(body), `"code":-32001`) || !strings.Contains(string(body), `"proxy":"mcp-cancel-proxy"`) {
		t.Errorf("answer to the call past its deadline: %s", body)
	}
	// With progress, the upstream's event stream is open: the error is its
	// last event.
	slow = mcpPost(t, url, session, `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"slow_ignore","arguments":{"seconds":3,"steps":30},"_meta":{"progressToken":"s"}}}`)
	var last string
	for m := range sseMessages(slow) {
		last = m
	}
	if !strings.Contains(last, `"id":4`) || !strings.Contains(last, `"code":-32001`) {
		t.Errorf("last event of the call past its deadline: %s", last)
	}
	sc.logs.waitFor(t, `"id":3,`, `"source":"deadline"`)
	for i, ev := range sc.events.waitCount(t, 2, events.DeadlinePassed, "tool", "slow_ignore") {
		if fmt.Sprint(ev["id"]) != fmt.Sprint(3+i) {
			t.Errorf("deadline event %d names request %v, want %d", i, ev["id"], 3+i)
		}
	}
	metrics, err := http.Get("http://" + adm + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(metrics.Body)
	metrics.Body.Close()
	for _, want := range []string{`mcp_cancel_proxy_hooks_total{outcome="ok",phase="on_cancel"} 1`,
		`mcp_cancel_proxy_hooks_total{outcome="ok",phase="on_late_result"} 1`, "mcp_cancel_proxy_deadlines_total 2",
		`mcp_cancel_proxy_cancels_total{source="deadline"} 2`, "mcp_cancel_proxy_requests_waiting 0",
		"mcp_cancel_proxy_hooks_waiting 0"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// TestValidateCommand: validate accepts the example and refuses a bad
// policy, naming each problem's line and column, with a non-zero status.
func TestValidateCommand(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(proxyBin, "validate", "../../config.example.yaml").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok") {
		t.Errorf("validate config.example.yaml: %v %s", err, out)
	}
	bad, _ := writeConfig(t, "policy:\n  rules:\n    - tool: x\n      timeout: -1s\n    - tool: y\n      escalate: reboot\n")
	out, err = exec.Command(proxyBin, "validate", bad).CombinedOutput()
	if err == nil {
		t.Fatalf("validate accepted %s", bad)
	}
	for _, want := range []string{bad + ":4:7: policy.rules[0].timeout", bad + ":6:7: policy.rules[1].escalate"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("validate output lacks %q:\n%s", want, out)
		}
	}
}

// TestE2EReloadOnSIGHUP: SIGHUP puts a changed policy in force for new
// requests; an invalid file is refused and the policy in force stays.
func TestE2EReloadOnSIGHUP(t *testing.T) {
	t.Parallel()
	cfg, _ := writeConfig(t, "policy:\n  rules:\n    - tool: block\n      timeout: 10m\n")
	w := startWrapped(t, "--config", cfg, "--log-level", "debug", "--", proxyBin, "example-server")
	w.initialize(`{}`)
	os.WriteFile(cfg, []byte("policy:\n  rules:\n    - tool: block\n      timeout: -5s\n"), 0o600)
	w.cmd.Process.Signal(syscall.SIGHUP)
	if kept := w.events.waitFor(t, events.PolicyKept, "why", "SIGHUP"); !strings.Contains(fmt.Sprint(kept["error"]), "timeout") {
		t.Errorf("the refusal does not name the bad setting: %v", kept)
	}
	os.WriteFile(cfg, []byte("policy:\n  rules:\n    - tool: block\n      timeout: 200ms\n"), 0o600)
	w.cmd.Process.Signal(syscall.SIGHUP)
	w.events.waitFor(t, events.PolicyReloaded)
	w.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"block","arguments":{"key":"h"}}}`)
	got := w.recvUntil(isResponse(1))
	if e, _ := got[len(got)-1]["error"].(map[string]any); e == nil || e["code"] != float64(-32001) {
		t.Errorf("a call under the reloaded policy: %v", got[len(got)-1])
	}
}

// TestE2ECorrelate: an agent platform's run id travels in the request's
// _meta; the tool reports its job id in progress. The cancel's audit line,
// the on_cancel hook's event (and its environment) and the hook's log line
// carry the run id (correlation), the MCP request id and the job id
// (captured) apart; a token beside the run id is copied nowhere.
func TestE2ECorrelate(t *testing.T) {
	t.Parallel()
	cfg, dir := writeConfig(t, `
policy:
  late_window: 1s
  rules:
    - tool: block
      correlate:
        run_id: /_meta/runId
      capture:
        job_id: /_meta/jobId
      on_cancel:
        exec: ["sh", "-c", "cat > $DIR/cancel.json; echo $MCP_CANCEL_CORRELATE_RUN_ID > $DIR/run"]
`)
	w := startWrapped(t, "--config", cfg, "--", proxyBin, "example-server")
	w.initialize(`{}`)
	w.send(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"block","arguments":{"key":"job-5"},"_meta":{"progressToken":"p","runId":"run-88","authToken":"s3cret"}}}`)
	w.recvUntil(func(m map[string]any) bool { return concerns(m, 4, "p") })
	w.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4}}`)
	hookLine := w.events.waitFor(t, events.HookRan)
	rec := auditLine(t, w.logs, "4", "upstream notified; compensating hook ran")
	ev := readEvent(t, filepath.Join(dir, "cancel.json"))
	for what, doc := range map[string]map[string]any{"audit line": rec, "hook event": ev} {
		corr, _ := doc["correlation"].(map[string]any)
		capt, _ := doc["captured"].(map[string]any)
		if corr["run_id"] != "run-88" || capt["job_id"] != "job-5" || len(corr) != 1 || len(capt) != 1 {
			t.Errorf("%s: correlation %v, captured %v", what, corr, capt)
		}
	}
	if rec["id"] != 4.0 || ev["request_id"] != 4.0 {
		t.Errorf("request ids: audit %v, event %v", rec["id"], ev["request_id"])
	}
	if corr, _ := hookLine["correlation"].(map[string]any); len(corr) != 1 || corr["run_id"] != "run-88" {
		t.Errorf("hook event: %v", hookLine)
	}
	if run, _ := os.ReadFile(filepath.Join(dir, "run")); strings.TrimSpace(string(run)) != "run-88" {
		t.Errorf("MCP_CANCEL_CORRELATE_RUN_ID=%q", run)
	}
	w.send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"release","arguments":{"key":"job-5"}}}`)
	w.recvUntil(isResponse(5))
	w.stdin.Close()
	<-w.exited
	event, _ := os.ReadFile(filepath.Join(dir, "cancel.json"))
	if strings.Contains(w.logs.all(), "s3cret") || strings.Contains(string(event), "s3cret") {
		t.Error("the token beside the run id was copied")
	}
}

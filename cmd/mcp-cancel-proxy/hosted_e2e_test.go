//go:build unix

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// hostingConfig hosts tasks for the example server's block and
// slow_honour tools, which it runs only as plain calls.
const hostingConfig = `
policy:
  rules:
    - tool: block
      task: host
    - tool: slow_honour
      task: host
`

// taskIDOf reads the task id of a CreateTaskResult.
func taskIDOf(t *testing.T, m map[string]any) string {
	t.Helper()
	res, _ := m["result"].(map[string]any)
	task, _ := res["task"].(map[string]any)
	id, _ := task["taskId"].(string)
	if id == "" || task["status"] != "working" {
		t.Fatalf("not a task: %v", m)
	}
	return id
}

// TestE2EHostedTaskStdio: through the wrapper, in front of the bundled
// go-sdk server, which runs its tools only as plain calls: the client
// sees tasks declared, gets a task for each task-augmented call, the
// result of one through tasks/result, and a tasks/cancel of the other
// stops the server's work (the server says it saw the cancel).
func TestE2EHostedTaskStdio(t *testing.T) {
	t.Parallel()
	cfg, _ := writeConfig(t, hostingConfig)
	w := startWrapped(t, "--config", cfg, "--", proxyBin, "example-server")
	w.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`)
	got := w.recvUntil(isResponse("init"))
	caps, _ := got[len(got)-1]["result"].(map[string]any)["capabilities"].(map[string]any)
	if tasks, _ := caps["tasks"].(map[string]any); tasks["cancel"] == nil || tasks["requests"] == nil {
		t.Errorf("the capabilities the client sees: %v", caps)
	}
	w.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	w.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow_honour","arguments":{"seconds":0.2,"steps":2},"task":{"ttl":60000}}}`)
	got = w.recvUntil(isResponse(1))
	slow := taskIDOf(t, got[len(got)-1])
	w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"block","arguments":{"key":"ht"},"task":{}}}`)
	got = w.recvUntil(isResponse(2))
	blocked := taskIDOf(t, got[len(got)-1])
	w.send(`{"jsonrpc":"2.0","id":3,"method":"tasks/result","params":{"taskId":"` + slow + `"}}`)
	got = w.recvUntil(isResponse(3))
	res, _ := got[len(got)-1]["result"].(map[string]any)
	meta, _ := res["_meta"].(map[string]any)
	if related, _ := meta["io.modelcontextprotocol/related-task"].(map[string]any); related["taskId"] != slow || res["structuredContent"] == nil {
		t.Errorf("tasks/result: %v", got[len(got)-1])
	}
	w.logs.waitFor(t, "example server: block ht: started")
	w.send(`{"jsonrpc":"2.0","id":4,"method":"tasks/cancel","params":{"taskId":"` + blocked + `"}}`)
	got = w.recvUntil(isResponse(4))
	if res, _ := got[len(got)-1]["result"].(map[string]any); res["status"] != "cancelled" {
		t.Errorf("tasks/cancel: %v", got[len(got)-1])
	}
	w.logs.waitFor(t, "example server: block ht: the request was cancelled")
	w.events.waitFor(t, events.TaskHosted, "task", blocked)
	w.send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"release","arguments":{"key":"ht"}}}`)
	w.send(`{"jsonrpc":"2.0","id":6,"method":"ping"}`)
	for _, m := range w.recvUntil(isResponse(6)) {
		if m["id"] == "mcp-cancel-proxy-r2" || m["id"] == float64(2) {
			t.Errorf("the client got %v after its task was cancelled", m)
		}
	}
	rec := auditLine(t, w.logs, "2", "upstream notified; answered after the cancel (suppressed)")
	if rec["source"] != "tasks_cancel" || rec["task_id"] != blocked {
		t.Errorf("audit line: %v", rec)
	}
}

// TestE2EHostedTaskSidecar: the same through the sidecar in front of the
// example server over Streamable HTTP: the task's POST answers at once,
// tasks/result's waits for the result, and tasks/cancel stops the work.
func TestE2EHostedTaskSidecar(t *testing.T) {
	t.Parallel()
	cfg, _ := writeConfig(t, hostingConfig)
	adm := freePort(t)
	run := startSidecarAs(t, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`,
		nil, "--config", cfg, "--admin", adm)
	server, url, session := run.server, run.url, run.session
	answer := func(body string) map[string]any {
		t.Helper()
		resp := mcpPost(t, url, session, body)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		text := string(b)
		if i := strings.LastIndex(text, "data: "); i >= 0 { // an event stream: its last event
			text = strings.TrimSpace(text[i+len("data: "):])
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(text), &m); err != nil {
			t.Fatalf("answer to %s: %q", body, b)
		}
		return m
	}
	slow := taskIDOf(t, answer(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow_honour","arguments":{"seconds":0.2,"steps":2},"task":{}}}`))
	blocked := taskIDOf(t, answer(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"block","arguments":{"key":"hs"},"task":{}}}`))
	if res, _ := answer(`{"jsonrpc":"2.0","id":3,"method":"tasks/result","params":{"taskId":"` + slow + `"}}`)["result"].(map[string]any); res["structuredContent"] == nil {
		t.Errorf("tasks/result: %v", res)
	}
	server.waitFor(t, "example server: block hs: started")
	if res, _ := answer(`{"jsonrpc":"2.0","id":4,"method":"tasks/cancel","params":{"taskId":"` + blocked + `"}}`)["result"].(map[string]any); res["status"] != "cancelled" {
		t.Errorf("tasks/cancel: %v", res)
	}
	server.waitFor(t, "example server: block hs: the request was cancelled")
	if n := metricValue(t, adm, "mcp_cancel_proxy_hosted_tasks"); n != 2 {
		t.Errorf("mcp_cancel_proxy_hosted_tasks: %v, want the session's 2", n)
	}
	waitMetric(t, adm, `mcp_cancel_proxy_cancels_total{source="tasks_cancel"}`, 1)
	mcpPost(t, url, session, `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"release","arguments":{"key":"hs"}}}`).Body.Close()
}

// TestE2ETypeScriptClientHostedTasks: the TypeScript SDK's own task API
// (1.32, 2025-11-25) against the example server, which has no tasks,
// through the wrapper, the bridge and the sidecar with task: host. The
// SDK sees tasks declared and the tools support them, asks for a task by
// itself, polls it and gets the tool's result; its cancelTask stops the
// server's work (the server says it saw the cancel).
func TestE2ETypeScriptClientHostedTasks(t *testing.T) {
	t.Parallel()
	node, dir := nodePeers(t)
	config, _ := writeConfig(t, hostingConfig)
	t.Run("wrapper", func(t *testing.T) {
		watchdog(t, 90*time.Second)
		tasksScript(t, node, dir, config, nil, "block,slow_honour", "example server: block ts: started", "example server: block ts: the request was cancelled")
	})
	t.Run("FastMCP", func(t *testing.T) { // the Python SDK's server, which runs no task itself either
		watchdog(t, 90*time.Second)
		config, _ := writeConfig(t, "policy:\n  rules:\n    - tool: slow\n      task: host\n")
		env, argv := fastMCP(t)
		server, _ := json.Marshal(argv)
		tasksScript(t, node, dir, config, nil, "slow", "", "slow: CANCELLED", append(env, "SERVER="+string(server),
			`DONE={"name":"slow","arguments":{"seconds":0.3,"steps":2}}`, `CANCEL={"name":"slow","arguments":{"seconds":60,"steps":60}}`, "RELEASE=")...)
	})
	t.Run("FastMCP behind the sidecar", func(t *testing.T) { // over Streamable HTTP, uvicorn's
		watchdog(t, 90*time.Second)
		config, _ := writeConfig(t, "policy:\n  rules:\n    - tool: slow\n      task: host\n")
		up, pyLogs := startFastMCP(t, "--http")
		front := freePort(t)
		sc := startWrapped(t, "--config", config, "--listen", front, "--upstream", "http://"+up+"/mcp")
		sc.events.waitFor(t, events.SidecarListening)
		t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
		tasksScript(t, node, dir, config, pyLogs, "slow", "", "slow: CANCELLED", "SIDECAR_URL=http://"+front+"/mcp", "RELEASE=",
			`DONE={"name":"slow","arguments":{"seconds":0.3,"steps":2}}`, `CANCEL={"name":"slow","arguments":{"seconds":60,"steps":60}}`)
	})
	t.Run("server-everything's own tasks relayed", func(t *testing.T) {
		watchdog(t, 90*time.Second)
		config, _ := writeConfig(t, "policy:\n  rules:\n    - tool: \"*\"\n      task: host\n")
		js := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
		server, _ := json.Marshal([]string{node, js, "stdio"})
		research := `{"name":"simulate-research-query","arguments":{"topic":"%s"}}`
		s := tasksScript(t, node, dir, config, nil, "", "", "", "SERVER="+string(server), "NO_GO=1", "RELEASE=",
			"DONE="+fmt.Sprintf(research, "tides"), "CANCEL="+fmt.Sprintf(research, "moons"))
		for _, id := range []string{s.DoneTask, s.CancelledTask} {
			if strings.HasPrefix(id, "mcp-cancel-proxy-task-") {
				t.Errorf("the proxy hosted task %s of a tool the server runs as a task itself", id)
			}
		}
	})
	t.Run("bridge", func(t *testing.T) {
		watchdog(t, 90*time.Second)
		up := freePort(t)
		server := startServer(t, exec.Command(proxyBin, "example-server", "--http", up))
		waitListening(t, up)
		tasksScript(t, node, dir, config, server, "block,slow_honour", "example server: block ts: started", "example server: block ts: the request was cancelled", "UPSTREAM=http://"+up+"/mcp")
	})
	t.Run("sidecar", func(t *testing.T) {
		watchdog(t, 90*time.Second)
		up, front := freePort(t), freePort(t)
		server := startServer(t, exec.Command(proxyBin, "example-server", "--http", up))
		waitListening(t, up)
		sc := startWrapped(t, "--config", config, "--listen", front, "--upstream", "http://"+up+"/mcp")
		sc.events.waitFor(t, events.SidecarListening)
		t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
		tasksScript(t, node, dir, config, server, "block,slow_honour", "example server: block ts: started", "example server: block ts: the request was cancelled", "SIDECAR_URL=http://"+front+"/mcp")
	})
}

// tasksScript runs ts-client-tasks.mjs with env, the server's log in
// server (nil: the server runs under the wrapper the script starts, whose
// stderr carries it), and checks what the client saw: the tools it was
// told support tasks (taskTools), and the server's line saying it saw the
// cancel (cancelled); with started, the script cancels only once the
// server's log says the call runs.
func tasksScript(t *testing.T, node, dir, config string, server *logTail, taskTools, started, cancelled string, env ...string) tasksSummary {
	t.Helper()
	script := exec.Command(node, filepath.Join(dir, "e2e", "ts-client-tasks.mjs"))
	script.Dir = dir
	script.Env = append(append(os.Environ(), "PROXY_BIN="+proxyBin, "CONFIG="+config), env...)
	if started != "" {
		script.Env = append(script.Env, "WAIT_STARTED=1")
	}
	stdin, _ := script.StdinPipe()
	stdout, _ := script.StdoutPipe()
	stderr, _ := script.StderrPipe()
	if err := script.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { script.Process.Kill(); script.Wait() }) // by its PID, if the test ends early
	if server == nil {
		server = newLogTail(stderr)
	} else {
		go io.Copy(os.Stderr, stderr)
	}
	out := bufio.NewScanner(stdout)
	if started != "" { // the call runs on the server before it is cancelled
		if !out.Scan() || out.Text() != "STARTED" {
			t.Fatalf("script said %q, want STARTED", out.Text())
		}
		server.waitFor(t, started)
		io.WriteString(stdin, "CANCEL\n")
	}
	if !out.Scan() || !strings.HasPrefix(out.Text(), "CANCELLED") {
		t.Fatalf("script said %q, want CANCELLED", out.Text())
	}
	if cancelled != "" {
		server.waitFor(t, cancelled)
		io.WriteString(stdin, "GO\n")
	}
	if !out.Scan() {
		t.Fatalf("no summary from the script: %v", out.Err())
	}
	var s tasksSummary
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatalf("summary %s: %v", out.Bytes(), err)
	}
	if !s.Declared || taskTools != "" && strings.Join(s.TaskTools, ",") != taskTools || len(s.Messages) < 2 ||
		s.Messages[0] != "taskCreated" || s.Messages[len(s.Messages)-1] != "result" || s.Result == nil ||
		s.CancelledTask == "" || s.CancelStatus != "cancelled" || s.AfterCancel != "cancelled" || len(s.Errors) > 0 {
		t.Errorf("the client saw %s", out.Bytes())
	}
	return s
}

// tasksSummary is what ts-client-tasks.mjs saw.
type tasksSummary struct {
	Declared                                           bool
	TaskTools, Messages, Errors                        []string
	Result                                             map[string]any
	DoneTask, CancelledTask, CancelStatus, AfterCancel string
}

// hostedTaskScenarios are the conformance suite's task scenarios
// (0.2.0-alpha.12, the 2026-07-28 tasks extension) that a server with no
// tasks passes behind the sidecar with task: host, and their checks. The
// others need what hosting does not do (docs/tasks.md): a tool that
// requires a task (tasks-required-task-error, and the test_tool_with_task
// of tasks-mrtr-composition: a hosted tool stays optional, since a client
// that asks no task gets the plain call), and status notifications
// (tasks-status-notifications, skipped by the suite).
var hostedTaskScenarios = map[string]int{
	"tasks-lifecycle":              9,
	"tasks-capability-negotiation": 5,
	"tasks-wire-fields":            4,
	"tasks-request-state-removal":  3,
	"tasks-request-headers":        5,
	"tasks-mrtr-input":             4,
	"tasks-dispatch-and-envelope":  9,
}

// TestConformanceHostedTasks runs the conformance suite's task scenarios
// against the example server, which runs every tool as a plain call,
// behind the sidecar with task: host for its conformance fixtures: over
// Streamable HTTP (stateless, 2026-07-28), on stdio, and over HTTP+SSE.
// Each scenario passes every check, and each slow_compute call that
// tasks/cancel ended (the lifecycle's 60-second ones among them) and the
// server started was stopped there, which it says. A call the server
// never started is one whose cancel came first: before its request was
// written (its audit line says "cancelled before dispatch"), or before
// the server's handler ran (the go-sdk then runs none, under load).
func TestConformanceHostedTasks(t *testing.T) {
	t.Parallel()
	node, dir := nodePeers(t)
	watchdog(t, 5*time.Minute)
	cfg, _ := writeConfig(t, `policy:
  rules:
    - tool: slow_compute
      task: host
    - tool: failing_job
      task: host
    - tool: protocol_error_job
      task: host
    - tool: confirm_delete
      task: host
    - tool: multi_input
      task: host
`)
	for _, upstream := range []string{"streamable", "stdio", "sse"} {
		t.Run(upstream, func(t *testing.T) {
			t.Parallel()
			front := freePort(t)
			var server, proxied *logTail // the example server's stderr, the proxy's (its audit lines)
			switch upstream {
			case "streamable":
				up := freePort(t)
				server = startExampleStateless(t, up)
				proxied = startServer(t, exec.Command(proxyBin, "--listen", front, "--upstream", "http://"+up+"/mcp", "--config", cfg, "--log-level", "warn"))
			case "sse":
				up := freePort(t)
				server = startServer(t, exec.Command(proxyBin, "example-server", "--sse", up))
				waitListening(t, up)
				proxied = startServer(t, exec.Command(proxyBin, "--listen", front, "--upstream", "http://"+up+"/sse", "--config", cfg, "--log-level", "warn"))
			case "stdio":
				server = startServer(t, exec.Command(proxyBin, "--listen", front, "--config", cfg, "--log-level", "warn", "--", proxyBin, "example-server"))
				proxied = server
			}
			waitListening(t, front)
			t.Cleanup(func() { // what the server and the proxy said of the cancelled calls
				if t.Failed() {
					for _, l := range strings.Split(server.all()+"\n"+proxied.all(), "\n") {
						if strings.Contains(l, "slow_compute") || strings.Contains(l, "tasks_cancel") {
							t.Log(l)
						}
					}
				}
			})
			for sc, checks := range hostedTaskScenarios {
				passed, failed := conformance(t, node, dir, "conformance-next", fmt.Sprintf("http://%s/mcp", front),
					"--spec-version", "2026-07-28", "--force", "--scenario", sc)
				if passed != checks || failed != 0 {
					t.Errorf("%s: %d passed, %d failed; want all %d passed", sc, passed, failed, checks)
				}
			}
			for _, label := range []string{"lifecycle-cancel", "request-state-removal"} {
				started := strings.Count(server.all(), "slow_compute "+label+": started")
				if started == 0 && label == "lifecycle-cancel" && !t.Failed() {
					t.Logf("%s: the server started none of the calls: each cancel came first", label)
				}
				if started > 0 {
					server.waitCount(t, started, "slow_compute "+label+": cancelled")
				}
			}
		})
	}
}

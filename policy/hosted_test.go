package policy

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
)

// hostingEngine is engine with task ids that count, and bounds.
func hostingEngine(t *testing.T, p Policy, tasks int, bytes int64) (*Engine, *clock.Fake, <-chan *Record) {
	t.Helper()
	if err := p.Validate("policy"); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))
	recs := make(chan *Record, 16)
	n := 0
	e, err := New(Options{Policy: p, Audit: Audit{Path: "off"}, Logger: zaptest.NewLogger(t), Clock: clk,
		OnAudit: func(r *Record) { recs <- r }, HostedTasks: tasks, TaskMemory: bytes,
		TaskIDs: func() string { n++; return fmt.Sprintf("t%d", n) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	return e, clk, recs
}

// taskCall is a task-augmented call of tool.
func taskCall(id int, tool string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"task":{}}}`, id, tool)
}

// taskRequest is a tasks/* request naming task.
func taskRequest(id int, method, task string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{"taskId":%q}}`, id, method, task)
}

// hostedCall hosts a task for a call of tool, and returns the own
// request the proxy sent upstream and the CreateTaskResult's task.
func hostedCall(t *testing.T, ft *fakeTransport, id int, tool string) (own action, task map[string]any) {
	t.Helper()
	if o := ft.client(taskCall(id, tool)); !o.Hold {
		t.Fatalf("the task-augmented call was not held: %+v", o)
	}
	served := ft.next() // the task first, then the call: an answer at once is the task's
	own = ft.next()
	if own.kind != "own" || served.kind != "serve" || !strings.Contains(string(own.frame), `"method":"tools/call"`) ||
		strings.Contains(string(own.frame), `"task"`) {
		t.Fatalf("actions %s %s, frame %s", own.kind, served.kind, own.frame)
	}
	var res struct {
		Result struct {
			Task map[string]any `json:"task"`
		} `json:"result"`
	}
	json.Unmarshal(served.reply, &res)
	return own, res.Result.Task
}

// serve waits for the next action, a request served with a reply.
func serve(t *testing.T, ft *fakeTransport) map[string]any {
	t.Helper()
	a := ft.next()
	if a.kind != "serve" {
		t.Fatalf("action %s, want serve", a.kind)
	}
	var m map[string]any
	json.Unmarshal(a.reply, &m)
	return m
}

// TestHostedTaskCancelRunsTheStory: tasks/cancel of a hosted task cancels
// its call upstream with the source tasks_cancel, runs on_cancel, and its
// late answer, suppressed, runs on_late_result; the audit line says so.
func TestHostedTaskCancelRunsTheStory(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "report", Task: "host", OnCancel: &Hook{Exec: []string{"true"}}, OnLateResult: &Hook{Exec: []string{"true"}}}}
	e, _, recs := hostingEngine(t, p, 0, 0)
	ft := newTransport(t, e)
	own, task := hostedCall(t, ft, 1, "report")
	if task["taskId"] != "t1" || task["status"] != "working" {
		t.Fatalf("task %v", task)
	}
	ft.client(taskRequest(2, "tasks/cancel", "t1"))
	if res := serve(t, ft)["result"].(map[string]any); res["status"] != "cancelled" {
		t.Errorf("tasks/cancel answered %v", res)
	}
	c := ft.next()
	if c.kind != "cancel-own" || c.call != own.call || c.source != proxy.SourceTaskCancel || !strings.Contains(string(c.cancel), `"requestId":"mcp-cancel-proxy-r1"`) {
		t.Fatalf("%s of %v from %s: %s", c.kind, c.call, c.source, c.cancel)
	}
	ft.server(`{"jsonrpc":"2.0","id":"mcp-cancel-proxy-r1","result":{"content":[]}}`)
	r := waitRecord(t, recs)
	if r.Source != "tasks_cancel" || r.TaskID != "t1" || r.Late == nil || r.Status != StatusCompensated || len(r.Hooks) != 2 {
		t.Errorf("audit: %+v", r)
	}
}

// hostingReport is an engine that hosts tasks of the tool "report", whose
// cancel runs an on_cancel hook, its audit lines, and a session of it.
func hostingReport(t *testing.T) (*Engine, <-chan *Record, *fakeTransport) {
	t.Helper()
	p := Defaults()
	p.Rules = []Rule{{Tool: "report", Task: "host", OnCancel: &Hook{Exec: []string{"true"}}}}
	e, _, recs := hostingEngine(t, p, 0, 0)
	return e, recs, newTransport(t, e)
}

// TestHostedTaskCallNeverSent: tasks/cancel that comes before the hosted
// call's request was written (its POST cut before a byte went) leaves the
// server nothing to stop: the audit line says the call was cancelled
// before dispatch, upstream not notified, and no on_cancel hook runs.
func TestHostedTaskCallNeverSent(t *testing.T) {
	watchdog(t, 30*time.Second)
	_, recs, ft := hostingReport(t)
	ft.unsent = true
	own, _ := hostedCall(t, ft, 1, "report")
	ft.client(taskRequest(2, "tasks/cancel", "t1"))
	serve(t, ft)
	if c := ft.next(); c.kind != "cancel-own" || c.call != own.call {
		t.Fatalf("%s of %v", c.kind, c.call)
	}
	r := waitRecord(t, recs)
	if r.Source != "tasks_cancel" || r.Notified || r.Status != StatusNotDispatched || len(r.Hooks) != 0 {
		t.Errorf("audit: %+v", r)
	}
	ft.server(`{"jsonrpc":"2.0","id":"mcp-cancel-proxy-r1","result":{"content":[]}}`) // an answer nobody is owed
}

// TestHostedTaskCancelledWhileItsCallGoes: a tasks/cancel that comes while
// the hosted call is being sent (its own request made, not yet noted on
// the task) is answered first, then stops the call once, with the source
// tasks_cancel. Before, the sending saw the task marked cancelled and
// cancelled the call itself, without a source and ahead of the answer,
// and the queued cancelHosted cancelled it a second time.
func TestHostedTaskCancelledWhileItsCallGoes(t *testing.T) {
	watchdog(t, 30*time.Second)
	_, recs, ft := hostingReport(t)
	ft.afterOwn = func() { ft.client(taskRequest(2, "tasks/cancel", "t1")) }
	own, _ := hostedCall(t, ft, 1, "report")
	if res := serve(t, ft)["result"].(map[string]any); res["status"] != "cancelled" {
		t.Errorf("tasks/cancel answered %v", res)
	}
	if c := ft.next(); c.kind != "cancel-own" || c.call != own.call || c.source != proxy.SourceTaskCancel {
		t.Fatalf("%s of %v from %q", c.kind, c.call, c.source)
	}
	ft.server(`{"jsonrpc":"2.0","id":"mcp-cancel-proxy-r1","result":{"content":[]}}`)
	if r := waitRecord(t, recs); r.Source != "tasks_cancel" {
		t.Errorf("audit: %+v", r)
	}
	ft.none() // no second cancel of the call
}

// counts returns how many tasks the bound counts, and their bytes.
func (b *hostedBound) counts() (int, int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.entries, b.bytes
}

// TestHostedTaskSessionEnd: a session that ends with a hosted task still
// working cancels it (source session_end, its hook run) and forgets its
// tasks; a finished task's result stops counting against the bound.
func TestHostedTaskSessionEnd(t *testing.T) {
	watchdog(t, 30*time.Second)
	e, recs, ft := hostingReport(t)
	hostedCall(t, ft, 1, "report")
	hostedCall(t, ft, 2, "report")
	ft.server(`{"jsonrpc":"2.0","id":"mcp-cancel-proxy-r2","result":{"content":[{"type":"text","text":"12345"}]}}`)
	ft.none()
	if n, b := e.hostedTasks.counts(); n != 2 || b == 0 {
		t.Fatalf("bound counts %d tasks, %d bytes", n, b)
	}
	ft.gov.Close()
	r := waitRecord(t, recs)
	if r.Source != "session_end" || r.TaskID != "t1" || len(r.Hooks) != 1 || !r.Hooks[0].OK {
		t.Errorf("audit: %+v", r)
	}
	if n, b := e.hostedTasks.counts(); n != 0 || b != 0 {
		t.Errorf("bound counts %d tasks, %d bytes after the session", n, b)
	}
}

// TestHostedTasksBounded: beyond limits.hosted_tasks the oldest finished
// task is dropped (then unknown); with none finished, a new one is
// refused with an error that names the limit.
func TestHostedTasksBounded(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "report", Task: "host"}}
	e, _, _ := hostingEngine(t, p, 2, 1<<20)
	ft := newTransport(t, e)
	hostedCall(t, ft, 1, "report")
	hostedCall(t, ft, 2, "report")
	ft.server(`{"jsonrpc":"2.0","id":"mcp-cancel-proxy-r1","result":{"content":[]}}`)
	ft.none()
	hostedCall(t, ft, 3, "report") // drops t1, finished
	ft.none()
	ft.client(taskRequest(4, "tasks/get", "t1"))
	if e, _ := serve(t, ft)["error"].(map[string]any); e == nil || e["code"] != float64(-32602) {
		t.Errorf("tasks/get of the dropped task: %v", e)
	}
	ft.client(taskCall(5, "report"))
	if e, _ := serve(t, ft)["error"].(map[string]any); e == nil || !strings.Contains(e["message"].(string), "limits.hosted_tasks") {
		t.Errorf("a task over the bound: %v", e)
	}
}

// TestHostedTasksList: tasks/list lists the session's hosted tasks, and
// those of another session are not in it.
func TestHostedTasksList(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "report", Task: "host"}}
	e, _, _ := hostingEngine(t, p, 0, 0)
	a, b := transportOf(t, e, "a", nil), transportOf(t, e, "b", nil)
	hostedCall(t, a, 1, "report")
	hostedCall(t, b, 1, "report")
	hostedCall(t, a, 2, "report")
	a.client(`{"jsonrpc":"2.0","id":3,"method":"tasks/list"}`)
	var ids []string
	for _, task := range serve(t, a)["result"].(map[string]any)["tasks"].([]any) {
		ids = append(ids, task.(map[string]any)["taskId"].(string))
	}
	if strings.Join(ids, ",") != "t1,t3" {
		t.Errorf("tasks/list: %v", ids)
	}
	b.client(taskRequest(2, "tasks/get", "t1")) // a's
	if e, _ := serve(t, b)["error"].(map[string]any); e == nil {
		t.Error("a session got another's task")
	}
}

// TestHostedTaskSettings: what task: host may say.
func TestHostedTaskSettings(t *testing.T) {
	p := Defaults()
	p.Rules = []Rule{{Tool: "a", Task: "background"}, {Method: "x", Task: "host"}, {Tool: "b", TaskTTL: dur(time.Second)},
		{Tool: "c", Task: "host", Reissue: "join"}, {Tool: "d", Task: "host", TaskTTL: dur(0)}}
	p.Defaults.Task = "host"
	err := p.Validate("policy")
	for _, want := range []string{`rules[0].task: "background" is not host`, "rules[1].task: task: host is for tools/call rules",
		"rules[2].task: task_ttl, task_poll_interval and task_after need task: host", "rules[3].task: task: host and reissue: join",
		"rules[4].task_ttl: must be positive", "defaults: max_concurrent, max_concurrent_scope, escalate, reissue and task"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate: %v\nwant %q", err, want)
		}
	}
}

// FuzzDeclareTasks: any initialize result gives one that declares tasks,
// or nothing, never a panic. The result is read as a client reads it: its
// members by their exact names (encoding/json's structs would take
// "capaBilities" for "capabilities" too).
func FuzzDeclareTasks(f *testing.F) {
	f.Add(`{"protocolVersion":"2025-11-25","capabilities":{"tasks":{"requests":{"tools":{}}}}}`)
	f.Add(`{"capabilities":{"tasks":7}}`)
	f.Add(`{"capaBilities":{"tAsks":0}}`)
	f.Fuzz(func(t *testing.T, res string) {
		out := declareTasks(json.RawMessage(res))
		if out == nil {
			return
		}
		member := json.RawMessage(out)
		for _, name := range []string{"capabilities", "tasks", "requests", "tools", "call"} {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(member, &obj); err != nil || obj[name] == nil {
				t.Fatalf("%s gave %s: no %q in %s (%v)", res, out, name, member, err)
			}
			member = obj[name]
		}
	})
}

// TestHostedTaskTTLRunsTheTimeoutHook: a hosted task whose ttl passes
// while it works is cancelled with the source task_ttl, which runs
// on_timeout, and is forgotten.
func TestHostedTaskTTLRunsTheTimeoutHook(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "report", Task: "host", TaskTTL: dur(time.Minute),
		OnCancel: &Hook{Exec: []string{"false"}}, OnTimeout: &Hook{Exec: []string{"true"}}}}
	e, clk, recs := hostingEngine(t, p, 0, 0)
	ft := newTransport(t, e)
	hostedCall(t, ft, 1, "report")
	clk.Advance(time.Minute)
	if c := ft.next(); c.kind != "cancel-own" || c.source != proxy.SourceTaskTTL {
		t.Fatalf("%s from %s", c.kind, c.source)
	}
	clk.Advance(p.LateWindow)
	r := waitRecord(t, recs)
	if r.Source != "task_ttl" || len(r.Hooks) != 1 || r.Hooks[0].Phase != "on_timeout" || !r.Hooks[0].OK {
		t.Errorf("audit: %+v", r)
	}
	ft.client(taskRequest(2, "tasks/get", "t1"))
	wantUnknownTask(t, ft, "after the ttl")
}

// TestHostedTaskUnknownOnceItsTTLPassed: a tasks/get that comes while the
// proxy cancels a task whose ttl passed is answered as for an unknown
// task, as every later one is (before, it got the task's cancelled view
// until the task was forgotten, a moment after its cancel went upstream:
// the transcript task-hosted-ttl-ends-the-task failed under -cpu 4).
func TestHostedTaskUnknownOnceItsTTLPassed(t *testing.T) {
	ft, clk := hostingSession(t, Rule{Tool: "report", Task: "host", TaskTTL: dur(time.Minute)})
	hostedCall(t, ft, 1, "report")
	ft.ownCancelled = func(*proxy.Call) {
		ft.ownCancelled = nil
		ft.client(taskRequest(2, "tasks/get", "t1"))
	}
	clk.Advance(time.Minute)
	if c := ft.next(); c.kind != "cancel-own" || c.source != proxy.SourceTaskTTL {
		t.Fatalf("%s from %s", c.kind, c.source)
	}
	wantUnknownTask(t, ft, "as the ttl's cancel goes")
	ft.client(taskRequest(3, "tasks/list", ""))
	if tasks, _ := serve(t, ft)["result"].(map[string]any)["tasks"].([]any); len(tasks) != 0 {
		t.Errorf("tasks/list after the ttl: %v, want none", tasks)
	}
}

// TestHostedTaskAfterCountsFromTheSend: under task_after, a 2026-07-28
// call still running when it passes gets its task, even when the clock
// moved while the call was being sent (before, the wait began after
// SendOwn returned, and a clock that had moved meanwhile delayed the task
// by as much: a transcript under -cpu 4 never gave it).
func TestHostedTaskAfterCountsFromTheSend(t *testing.T) {
	ft, clk := hostingSession(t, Rule{Tool: "quick", Task: "host", TaskAfter: dur(time.Second)})
	ft.ownSent = func(*proxy.Call) {
		ft.ownSent = nil
		clk.Advance(time.Second) // the server has the call as the second passes
	}
	call := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"quick","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
		`"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}}`
	if o := ft.client(call); !o.Hold {
		t.Fatalf("the call was not held: %+v", o)
	}
	if a := ft.next(); a.kind != "own" {
		t.Fatalf("action %s, want the call sent", a.kind)
	}
	if res, _ := serve(t, ft)["result"].(map[string]any); res["resultType"] != "task" {
		t.Errorf("after task_after: %v, want the task", res)
	}
}

// FuzzWithoutTask: any params give the server's params, without task and
// without the tasks extension, or nothing; never a panic.
func FuzzWithoutTask(f *testing.F) {
	f.Add(`{"name":"a","task":{"ttl":1},"_meta":{"io.modelcontextprotocol/clientCapabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}}}}`)
	f.Add(`{"_meta":{"io.modelcontextprotocol/clientCapabilities":7}}`)
	f.Fuzz(func(t *testing.T, params string) {
		out, _, ok := withoutTask(json.RawMessage(params))
		if !ok {
			return
		}
		var top map[string]json.RawMessage
		json.Unmarshal(out, &top)
		for k := range top {
			if strings.EqualFold(k, "task") {
				t.Fatalf("%s gave %s", params, out)
			}
		}
		if len(field(out, "_meta", metaClientCaps, "extensions", extTasks)) > 0 {
			t.Fatalf("%s gave %s", params, out)
		}
	})
}

// TestHostedTaskAsksBeforeItsCallIsKnown: a server that asks for input on
// a hosted call's stream before the proxy's SendOwn has returned (it read
// the request and answered at once) still makes the task input_required.
// Before, the request was dropped: the governor did not know the call yet
// (TestHostedTaskAsksForInput failed so about 1 run in 150 under -race).
func TestHostedTaskAsksBeforeItsCallIsKnown(t *testing.T) {
	ft := reportHosted(t)
	ft.ownSent = func(c *proxy.Call) {
		ft.ownSent = nil
		ft.gov.(proxy.OwnMessages).FromOwn(c, []byte(elicitation))
	}
	hostedCall(t, ft, 1, "report")
	wantInputRequired(t, ft, 2)
}

// elicitation is a server's request for input.
const elicitation = `{"jsonrpc":"2.0","id":"ask","method":"elicitation/create","params":{"message":"which?"}}`

// reportHosted is a session whose governor hosts a task for each call of
// the tool report.
func reportHosted(t *testing.T) *fakeTransport {
	ft, _ := hostingSession(t, Rule{Tool: "report", Task: "host"})
	return ft
}

// hostingSession is a session under one rule, and the clock of its
// engine.
func hostingSession(t *testing.T, rule Rule) (*fakeTransport, *clock.Fake) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{rule}
	e, clk, _ := hostingEngine(t, p, 0, 0)
	return newTransport(t, e), clk
}

// wantUnknownTask wants the next action to serve the error of an unknown
// task (-32602); when says when the request came.
func wantUnknownTask(t *testing.T, ft *fakeTransport, when string) {
	t.Helper()
	if e, _ := serve(t, ft)["error"].(map[string]any); e == nil || e["code"] != float64(-32602) {
		t.Errorf("a tasks/* request %s: %v, want -32602 (unknown task)", when, e)
	}
}

// wantInputRequired asks tasks/get (as request id) of task t1, and wants it
// input_required.
func wantInputRequired(t *testing.T, ft *fakeTransport, id int) {
	t.Helper()
	ft.client(taskRequest(id, "tasks/get", "t1"))
	if res := serve(t, ft)["result"].(map[string]any); res["status"] != "input_required" {
		t.Errorf("tasks/get: %v, want input_required", res)
	}
}

// TestHostedTaskAsksForInput: a server's request on a hosted call's own
// stream (FromOwn) makes the task input_required until a tasks/result
// carries it, tagged with the task; progress goes only to a tasks/result
// that waits.
func TestHostedTaskAsksForInput(t *testing.T) {
	ft := reportHosted(t)
	own, _ := hostedCall(t, ft, 1, "report")
	g := ft.gov.(proxy.OwnMessages)
	g.FromOwn(own.call, []byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1}}`)) // none waits: dropped
	g.FromOwn(own.call, []byte(elicitation))
	wantInputRequired(t, ft, 2)
	ft.client(taskRequest(3, "tasks/result", "t1"))
	n := ft.next()
	if n.kind != "notify" || !strings.Contains(string(n.frame), `"io.modelcontextprotocol/related-task":{"taskId":"t1"}`) ||
		!strings.Contains(string(n.frame), `"method":"elicitation/create"`) {
		t.Fatalf("%s: %s, want the request tagged with its task on tasks/result", n.kind, n.frame)
	}
	ft.client(taskRequest(4, "tasks/get", "t1"))
	if res := serve(t, ft)["result"].(map[string]any); res["status"] != "working" {
		t.Errorf("tasks/get after the request went: %v, want working", res)
	}
	g.FromOwn(own.call, []byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":2}}`))
	if n := ft.next(); n.kind != "notify" || !strings.Contains(string(n.frame), `"progress":2`) {
		t.Errorf("%s: %s, want the progress on the waiting tasks/result", n.kind, n.frame)
	}
}

// TestHostedTasksPerPrincipal: where the process serves several clients,
// one principal holds at most limits.hosted_tasks_per_principal tasks (an
// eighth of limits.hosted_tasks by default), and so does one address: a
// fresh session or credential from the same address buys no fresh share,
// while another client's task is still hosted. Before, one client filled
// the whole bound and every other client's task was refused.
func TestHostedTasksPerPrincipal(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "report", Task: "host"}}
	e, _, _ := hostingEngine(t, p, 16, 1<<20) // 2 per principal
	owned := func(principal, peer string) *fakeTransport {
		ft := newTransport(t, e)
		ft.owner = func(*proxy.Call) (string, string) { return principal, peer }
		return ft
	}
	refused := func(ft *fakeTransport, id int) {
		t.Helper()
		ft.client(taskCall(id, "report"))
		e, _ := serve(t, ft)["error"].(map[string]any)
		if e == nil || !strings.Contains(e["message"].(string), "limits.hosted_tasks_per_principal") {
			t.Errorf("a task over the client's share: %v", e)
		}
	}
	greedy := owned("session 1", "192.0.2.1")
	hostedCall(t, greedy, 1, "report")
	hostedCall(t, greedy, 2, "report")
	refused(greedy, 3)
	refused(owned("session 2", "192.0.2.1"), 4)    // the same address, a fresh session
	refused(owned("credential x", "192.0.2.1"), 5) // or a fresh credential
	hostedCall(t, owned("session 3", "192.0.2.2"), 6, "report")
	// A finished task of the client's own makes room for its next.
	greedy.server(`{"jsonrpc":"2.0","id":"mcp-cancel-proxy-r1","result":{"content":[]}}`)
	greedy.none()
	hostedCall(t, greedy, 7, "report")
}

// TestHostedPollCancelledIsForgotten: a tasks/result poll cancelled by its
// client (or left by it, proxy.Session.Left) is no longer kept waiting on
// its task: when the task ends, nothing is served for it. Before, every
// dropped poll stayed held until its task ended (20,000 held 170 MB).
func TestHostedPollCancelledIsForgotten(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "report", Task: "host"}}
	e, _, _ := hostingEngine(t, p, 16, 1<<20)
	ft := newTransport(t, e)
	hostedCall(t, ft, 1, "report")
	o := ft.client(taskRequest(2, "tasks/result", "t1"))
	if !o.Hold || o.Request == nil {
		t.Fatalf("the poll was not held: %+v", o)
	}
	g := ft.gov.(*governor)
	if !g.Waits(o.Request) {
		t.Fatal("the held poll is not one the proxy waits to answer")
	}
	ft.client(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`)
	ft.none()
	g.mu.Lock()
	polls, waiting := len(g.polls), len(g.tasks["t1"].waiting)
	g.mu.Unlock()
	if polls != 0 || waiting != 0 {
		t.Errorf("after its cancel the poll is still kept: %d polls, %d waiting on the task", polls, waiting)
	}
	ft.server(`{"jsonrpc":"2.0","id":"mcp-cancel-proxy-r1","result":{"content":[]}}`)
	ft.none()
}

// TestHostedCallCancelledAtShutdownWhileItIsSent: a shutdown that comes
// while a hosted task's call is being sent (SendOwn has not returned, so
// its own request is not known yet) has that call cancelled before
// CancelOwnWork returns, which the session's CancelAll calls before it
// goes on to close its way to the server. Before, the cancel went once
// the send ended, after CancelAll had returned: behind a stdio server
// over HTTP the session had closed its way to the server by then, and the
// call ran on (the transcript task-hosted-2026-ends-with-the-proxy failed
// so once under -cpu 4).
func TestHostedCallCancelledAtShutdownWhileItIsSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := reportHosted(t)
		returned := make(chan struct{})
		ft.ownSent = func(*proxy.Call) {
			ft.ownSent = nil
			go func() {
				ft.gov.(proxy.OwnWork).CancelOwnWork(proxy.SourceShutdown, "the proxy is shutting down")
				close(returned)
			}()
			synctest.Wait() // CancelOwnWork has done what it can while the call is being sent
			select {
			case <-returned:
				t.Error("CancelOwnWork returned while a hosted call was being sent, before the call's cancel")
			default:
			}
		}
		hostedCall(t, ft, 1, "report")
		<-returned
		if a := ft.next(); a.kind != "cancel-own" || a.source != proxy.SourceShutdown {
			t.Errorf("after CancelOwnWork: %s from %s, want the call's cancel", a.kind, a.source)
		}
	})
}

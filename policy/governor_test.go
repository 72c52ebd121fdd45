package policy

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// TestDeadline: the deadline passes on the injected clock, not before; the
// request is cancelled upstream as a client cancel would be, the client
// gets the proxy's own timeout error, the late result is suppressed, and
// the audit line tells it all.
func TestDeadline(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "report", Timeout: dur(2 * time.Minute)}}
	e, clk, recs := engine(t, p)
	ft := newTransport(t, e)
	ft.client(call(1, "report", ""))
	ft.client(call(2, "other", "")) // no rule, no deadline
	clk.Advance(2*time.Minute - time.Second)
	ft.none()
	clk.Advance(time.Second)
	a := ft.next()
	if a.kind != "expire" || a.call.ID() != framing.IntID(1) {
		t.Fatalf("action %s for %v, want expire of 1", a.kind, a.call.ID())
	}
	if !strings.Contains(string(a.cancel), `"requestId":1`) {
		t.Errorf("cancel for the server: %s", a.cancel)
	}
	var reply struct {
		ID    int `json:"id"`
		Error struct {
			Code int               `json:"code"`
			Data map[string]string `json:"data"`
		} `json:"error"`
	}
	json.Unmarshal(a.reply, &reply)
	if reply.ID != 1 || reply.Error.Code != proxy.CodeDeadline || reply.Error.Data["proxy"] != "mcp-cancel-proxy" || reply.Error.Data["timeout"] != "2m0s" {
		t.Errorf("reply to the client: %s", a.reply)
	}
	if o := ft.server(result(1, `{"content":[]}`)); o.Verdict != proxy.Suppress {
		t.Errorf("late result: verdict %v, want suppressed", o.Verdict)
	}
	r := waitRecord(t, recs)
	if r.Source != "deadline" || r.Late == nil || r.Status != StatusAnsweredLate || !r.Dispatched || r.Tool != "report" {
		t.Errorf("audit: %+v", r)
	}
	clk.Advance(time.Hour)
	ft.none() // the other call never expires
}

// TestNoDeadlineForInitialize: initialize is never cancelled, not even by
// the proxy's own deadline.
func TestNoDeadlineForInitialize(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Defaults.Timeout = dur(time.Second)
	e, clk, _ := engine(t, p)
	ft := newTransport(t, e)
	ft.client(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}`)
	clk.Advance(time.Hour)
	ft.none()
}

// TestProgressPushesTheDeadlineBack: with reset_on_progress, progress
// pushes the deadline to now+timeout, but never past max_timeout.
func TestProgressPushesTheDeadlineBack(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "long", Timeout: dur(time.Minute), ResetOnProgress: yes(), MaxTimeout: dur(150 * time.Second)}}
	e, clk, _ := engine(t, p)
	ft := newTransport(t, e)
	ft.client(call(1, "long", `,"_meta":{"progressToken":"p1"}`))
	clk.Advance(50 * time.Second)
	ft.server(progress("p1", 1, "working")) // deadline now 1m50s
	clk.Advance(50 * time.Second)           // at 1m40s: would have passed at 1m
	ft.none()
	ft.server(progress("p1", 2, "still")) // now+1m = 2m40s, capped at 2m30s
	clk.Advance(49 * time.Second)         // 2m29s
	ft.none()
	clk.Advance(time.Second) // 2m30s
	if a := ft.next(); a.kind != "expire" {
		t.Fatalf("action %s, want expire at max_timeout", a.kind)
	}
}

// TestProgressTheClientNeverAskedFor: a request without a progress token
// whose deadline resets on progress goes out with one of the proxy's own;
// progress under it pushes the deadline back and is kept from the client.
// The governor asks for it only then: not for a request with a token of
// its own, a rule that does not reset, one without a deadline, or a task.
func TestProgressTheClientNeverAskedFor(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "long", Timeout: dur(time.Minute), ResetOnProgress: yes()},
		{Tool: "fixed", Timeout: dur(time.Minute)}, {Tool: "free", ResetOnProgress: yes()}}
	e, clk, _ := engine(t, p)
	ft := newTransport(t, e)
	o := ft.client(call(1, "long", ""))
	if !strings.Contains(string(o.Rewritten), `"_meta":{"progressToken":"mcp-cancel-proxy-w1"}`) {
		t.Fatalf("the request went out as %s, want the proxy's own token in params._meta", o.Rewritten)
	}
	clk.Advance(50 * time.Second)
	if o := ft.server(progress("mcp-cancel-proxy-w1", 1, "working")); o.Verdict != proxy.Drop {
		t.Errorf("progress under the proxy's token: verdict %v, want it kept from the client", o.Verdict)
	}
	clk.Advance(50 * time.Second) // at 1m40s: would have passed at 1m
	ft.none()
	for i, req := range []string{call(2, "long", `,"_meta":{"progressToken":"p"}`), call(3, "fixed", ""), call(4, "free", ""),
		call(5, "long", `,"task":{"ttl":1000}`)} {
		if o := ft.client(req); o.Rewritten != nil {
			t.Errorf("request %d went out as %s, want it as it came", i+2, o.Rewritten)
		}
	}
}

// TestProgressWithoutResetKeepsTheDeadline: without the flag, progress
// changes nothing.
func TestProgressWithoutResetKeepsTheDeadline(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "long", Timeout: dur(time.Minute)}}
	e, clk, _ := engine(t, p)
	ft := newTransport(t, e)
	ft.client(call(1, "long", `,"_meta":{"progressToken":"p1"}`))
	clk.Advance(50 * time.Second)
	ft.server(progress("p1", 1, "working"))
	clk.Advance(10 * time.Second)
	if a := ft.next(); a.kind != "expire" {
		t.Fatalf("action %s, want expire", a.kind)
	}
}

// TestMaxConcurrent: beyond the cap requests wait, in arrival order; one
// cancelled while waiting is never sent, and says so in the audit trail.
func TestMaxConcurrent(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "db_*", MaxConcurrent: 1}}
	e, _, recs := engine(t, p)
	ft := newTransport(t, e)
	if o := ft.client(call(1, "db_query", "")); o.Hold {
		t.Fatal("the first request was held")
	}
	o2 := ft.client(call(2, "db_write", ""))
	o3 := ft.client(call(3, "db_query", ""))
	if !o2.Hold || !o3.Hold {
		t.Fatalf("requests beyond the cap not held: %v %v", o2.Hold, o3.Hold)
	}
	if o := ft.client(call(4, "web", "")); o.Hold {
		t.Fatal("a request of no capped rule was held")
	}
	oc := ft.client(cancel(2))
	if oc.Cancelled == nil {
		t.Fatal("cancel of a waiting request not accepted")
	}
	ft.withdraw(oc.Cancelled) // as the relay does for a held request
	r := waitRecord(t, recs)
	if r.Status != StatusNotDispatched || r.Dispatched || string(r.ID) != "2" {
		t.Errorf("audit: %+v", r)
	}
	ft.server(result(1, `{}`)) // a slot frees: 3 goes, 2 never
	if a := ft.next(); a.kind != "dispatch" || a.call.ID() != framing.IntID(3) {
		t.Fatalf("action %s for %v, want dispatch of 3", a.kind, a.call.ID())
	}
	ft.none()
}

// TestMaxConcurrentSessionEnds: a session that ends with a request holding
// the only slot, and another waiting, gives both back: the next session's
// request goes.
func TestMaxConcurrentSessionEnds(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "db", MaxConcurrent: 1}}
	e, _, _ := engine(t, p)
	first, second := newTransport(t, e), newTransport(t, e)
	first.client(call(1, "db", ""))
	first.client(call(2, "db", ""))
	if o := second.client(call(1, "db", "")); !o.Hold {
		t.Fatal("beyond the cap, not held")
	}
	first.gov.Close()
	if a := second.next(); a.kind != "dispatch" || a.call.ID() != framing.IntID(1) {
		t.Fatalf("action %s for %v, want the other session's request dispatched", a.kind, a.call.ID())
	}
	first.none()
}

// TestMaxConcurrentDeadlineWhileWaiting: a request whose deadline passes
// while it waits is answered with the timeout error and never sent.
func TestMaxConcurrentDeadlineWhileWaiting(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "slow", MaxConcurrent: 1, Timeout: dur(time.Minute)}}
	e, clk, recs := engine(t, p)
	ft := newTransport(t, e)
	ft.client(call(1, "slow", ""))
	clk.Advance(30 * time.Second)
	if o := ft.client(call(2, "slow", "")); !o.Hold {
		t.Fatal("second request not held")
	}
	clk.Advance(30 * time.Second) // 1 expires
	a := ft.next()
	if a.kind != "expire" || a.call.ID() != framing.IntID(1) {
		t.Fatalf("got %s %v", a.kind, a.call.ID())
	}
	// 1's slot goes to 2, which is sent; at 1m30s 2 expires in turn.
	if a := ft.next(); a.kind != "dispatch" || a.call.ID() != framing.IntID(2) {
		t.Fatalf("got %s %v, want dispatch of 2", a.kind, a.call.ID())
	}
	clk.Advance(30 * time.Second) // 2 expires in turn, and 1's late window ends
	if a := ft.next(); a.kind != "expire" || a.call.ID() != framing.IntID(2) {
		t.Fatalf("got %s %v, want expire of 2", a.kind, a.call.ID())
	}
	if r := waitRecord(t, recs); string(r.ID) != "1" || r.Status != StatusNotConfirmed || r.Source != "deadline" {
		t.Errorf("audit: %+v", r)
	}
}

// TestCompletedBeforeTheCancel: a cancel that comes after the answer gets
// its audit line, and no hook runs.
func TestCompletedBeforeTheCancel(t *testing.T) {
	watchdog(t, 30*time.Second)
	e, _, recs := engine(t, Defaults())
	ft := newTransport(t, e)
	ft.client(call(7, "quick", ""))
	ft.server(result(7, `{}`))
	if o := ft.client(cancel(7)); o.Verdict != proxy.Drop {
		t.Fatal("cancel of an answered request passed")
	}
	if r := waitRecord(t, recs); r.Status != StatusCompletedBefore || r.Notified {
		t.Errorf("audit: %+v", r)
	}
}

// TestClientCancelNotConfirmed: a cancel with no late answer is written
// as "stop not confirmed" once the late window passes, with what was
// captured from progress.
func TestClientCancelNotConfirmed(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "job", Capture: map[string]Pointers{"job_id": {"/message"}}}}
	e, clk, recs := engine(t, p)
	ft := newTransport(t, e)
	ft.client(call(1, "job", `,"_meta":{"progressToken":"t"}`))
	ft.server(progress("t", 1, "job-42"))
	ft.client(cancel(1))
	ft.none()
	clk.Advance(p.LateWindow)
	r := waitRecord(t, recs)
	if r.Status != StatusNotConfirmed || r.Source != "client" || r.Reason != "user stop" || string(r.Captured["job_id"]) != `"job-42"` {
		t.Errorf("audit: %+v", r)
	}
}

// TestCorrelate: the client's run id, read from the request's _meta by
// correlate, the MCP request id and the provider's job id captured from
// progress stay apart in the audit line; an object is not copied.
func TestCorrelate(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "job", Capture: map[string]Pointers{"job_id": {"/message"}},
		Correlate: map[string]Pointers{"run_id": {"/_meta/runId"}, "whole": {"/_meta/agent"}}}}
	e, clk, recs := engine(t, p)
	ft := newTransport(t, e)
	ft.client(call(7, "job", `,"_meta":{"progressToken":"t","runId":"run-1","agent":{"key":"k"}}`))
	ft.server(progress("t", 1, "job-42"))
	ft.client(cancel(7))
	clk.Advance(p.LateWindow)
	r := waitRecord(t, recs)
	if string(r.ID) != "7" || string(r.Correlation["run_id"]) != `"run-1"` || string(r.Captured["job_id"]) != `"job-42"` {
		t.Errorf("audit: id %s, correlation %s, captured %s", r.ID, r.Correlation, r.Captured)
	}
	if _, ok := r.Correlation["whole"]; ok || len(r.Correlation) != 1 {
		t.Errorf("correlation %s: only strings and numbers are copied", r.Correlation)
	}
}

// TestCorrelateRefusesCredentials: a correlate pointer at a token, a
// secret or the like is a configuration error.
func TestCorrelateRefusesCredentials(t *testing.T) {
	for _, ptr := range []string{"/_meta/progressToken", "/_meta/authorization", "/_meta/apiKey", "/_meta/x/clientSecret"} {
		p := Defaults()
		p.Rules = []Rule{{Tool: "job", Correlate: map[string]Pointers{"x": {ptr}}}}
		if err := p.Validate("policy"); err == nil || !strings.Contains(err.Error(), "credential") {
			t.Errorf("correlate %s: %v, want a credential refused", ptr, err)
		}
	}
	p := Defaults()
	p.Rules = []Rule{{Tool: "job", Correlate: map[string]Pointers{"run": {"/_meta/runId"}}}}
	if err := p.Validate("policy"); err != nil {
		t.Error(err)
	}
}

// TestTaskCancel: a cancel for a task-augmented request whose task was
// created becomes tasks/cancel, sent by the proxy, whose answer never
// reaches the client; a cancel of a tasks/get call leaves the task alone.
func TestTaskCancel(t *testing.T) {
	watchdog(t, 30*time.Second)
	e, _, recs := engine(t, Defaults())
	ft := newTransport(t, e)
	ft.client(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}`)
	ft.server(result(0, `{"capabilities":{"tasks":{"cancel":{},"requests":{"tools":{"call":{}}}}}}`))
	ft.client(call(1, "research", `,"task":{"ttl":60000}`))
	ft.server(result(1, `{"task":{"taskId":"task-9","status":"working"}}`))
	ft.client(`{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"taskId":"task-9"}}`)
	ft.client(cancel(2)) // stops waiting for tasks/get only
	ft.server(result(2, `{"taskId":"task-9","status":"working"}`))
	ft.client(cancel(1))
	a := ft.next()
	if a.kind != "own" || !strings.Contains(string(a.frame), `"method":"tasks/cancel"`) || !strings.Contains(string(a.frame), `"taskId":"task-9"`) {
		t.Fatalf("action %s %s, want tasks/cancel for task-9", a.kind, a.frame)
	}
	var f framing.Frame
	f.Parse(a.frame)
	answer := `{"jsonrpc":"2.0","id":` + string(f.Msgs[0].ID.AppendJSON(nil)) + `,"result":{"taskId":"task-9","status":"cancelled"}}`
	if o := ft.server(answer); o.Verdict != proxy.Drop {
		t.Error("the answer to the proxy's tasks/cancel would reach the client")
	}
	var task *Record
	for task == nil {
		if r := waitRecord(t, recs); string(r.ID) == "1" {
			task = r
		}
	}
	if task.Status != StatusTaskCancelled || task.TaskID != "task-9" || !task.Notified {
		t.Errorf("audit: %+v", task)
	}
	ft.none() // tasks/get's cancel sent no tasks/cancel
}

// TestTaskCancelNotDeclared: without tasks.cancel in the server's
// capabilities, the proxy sends none, and the audit says so.
func TestTaskCancelNotDeclared(t *testing.T) {
	watchdog(t, 30*time.Second)
	e, _, recs := engine(t, Defaults())
	ft := newTransport(t, e)
	ft.client(call(1, "research", `,"task":{}`))
	ft.server(result(1, `{"task":{"taskId":"task-1","status":"working"}}`))
	ft.client(cancel(1))
	r := waitRecord(t, recs)
	if r.Status != StatusTaskNotCancel || !strings.Contains(r.TaskCancel, "did not declare") {
		t.Errorf("audit: %+v", r)
	}
	ft.none()
}

// TestEscalateRestart: a cancelled request of an escalate: restart rule
// still unanswered after restart_after restarts the server; one answered
// in time does not.
func TestEscalateRestart(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "render", Escalate: "restart"}}
	e, clk, _ := engine(t, p)
	ft := newTransport(t, e)
	ft.restart = true
	ft.client(call(1, "render", ""))
	ft.client(call(2, "render", ""))
	ft.client(cancel(1))
	ft.client(cancel(2))
	ft.server(result(2, `{}`)) // 2 stopped after all
	clk.Advance(p.RestartAfter)
	a := ft.next()
	if a.kind != "restart" || !strings.Contains(a.reason, "request 1 ") {
		t.Fatalf("action %s %q, want a restart for 1", a.kind, a.reason)
	}
	ft.none()
}

// TestReloadKeepsRulesOfRequestsInFlight: a reload applies to requests
// that start after it.
func TestReloadKeepsRulesOfRequestsInFlight(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "t", Timeout: dur(time.Minute)}}
	e, clk, _ := engine(t, p)
	ft := newTransport(t, e)
	ft.client(call(1, "t", ""))
	q := Defaults()
	q.Rules = []Rule{{Tool: "t", Timeout: dur(10 * time.Minute)}}
	e.Reload(q)
	ft.client(call(2, "t", ""))
	clk.Advance(time.Minute)
	if a := ft.next(); a.call.ID() != framing.IntID(1) {
		t.Fatalf("expired %v, want 1", a.call.ID())
	}
	ft.none()
}

// TestTaskDeadline: a task-augmented call's deadline still holds once the
// task is created; when it passes, the task is cancelled with tasks/cancel.
func TestTaskDeadline(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "research", Timeout: dur(time.Minute)}}
	e, clk, recs := engine(t, p)
	ft := newTransport(t, e)
	ft.client(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}`)
	ft.server(result(0, `{"capabilities":{"tasks":{"cancel":{}}}}`))
	ft.client(call(1, "research", `,"task":{}`))
	ft.server(result(1, `{"task":{"taskId":"t-1","status":"working"}}`))
	clk.Advance(time.Minute)
	a := ft.next()
	if a.kind != "own" || !strings.Contains(string(a.frame), `"taskId":"t-1"`) {
		t.Fatalf("action %s %s, want tasks/cancel for t-1", a.kind, a.frame)
	}
	a.onAnswer(&framing.Message{IsError: true, Raw: []byte(`{"jsonrpc":"2.0","id":"x","error":{"code":-32602,"message":"task already completed"}}`)})
	if r := waitRecord(t, recs); r.Source != "deadline" || r.Status != StatusTaskNotCancel || !strings.Contains(r.TaskCancel, "already completed") {
		t.Errorf("audit: %+v", r)
	}
}

// TestAnsweredRequestsRemembered: a cancel after the answer finds the
// request among the last recentMax answered (its audit line says it
// completed first); an older one is forgotten.
func TestAnsweredRequestsRemembered(t *testing.T) {
	watchdog(t, 30*time.Second)
	e, _, recs := engine(t, Defaults())
	ft := newTransport(t, e)
	last := recentMax + 2
	for i := 1; i <= last; i++ {
		ft.client(call(i, "t", ""))
		ft.server(result(i, `{}`))
	}
	for _, id := range []int{1, 2, last, 3} { // 1 and 2 left the ring
		ft.client(cancel(id))
	}
	for _, want := range []string{fmt.Sprint(last), "3"} {
		if r := waitRecord(t, recs); string(r.ID) != want || r.Status != StatusCompletedBefore {
			t.Errorf("audit %s %q, want %s %q", r.ID, r.Status, want, StatusCompletedBefore)
		}
	}
	select {
	case r := <-recs:
		t.Errorf("audit of a request no longer remembered: %+v", r)
	default:
	}
}

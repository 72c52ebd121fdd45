package policy

import (
	"cmp"
	"container/list"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// A task: host rule's tool runs as a task for a client that asks for one
// (params.task, protocol 2025-11-25) on a server that runs it only as a
// plain call. The client's tools/call is held and answered at once with a
// CreateTaskResult (Actions.Serve); the call goes upstream as a request of
// the proxy's own, without params.task (Actions.SendOwn), and its answer
// is the task's result. The client's tasks/get, tasks/result, tasks/list
// and tasks/cancel naming a hosted task are held and served from it;
// tasks/cancel, the task's ttl, a deadline and the session's end cancel
// the call upstream (Actions.CancelOwn) as any cancel would, with its
// hooks and audit line. The client sees the server declare tasks (the
// answer to initialize) and the rule's tools support them (tools/list).

// The statuses of a task.
const (
	taskWorking       = "working"
	taskInputRequired = "input_required"
	taskCompleted     = "completed"
	taskFailed        = "failed"
	taskCancelled     = "cancelled"
)

// metaRelatedTask tags a hosted task's result with its task.
const metaRelatedTask = "io.modelcontextprotocol/related-task"

// hosted is a task the proxy runs for a client.
type hosted struct {
	id               string
	rec              *record     // its call's story: rec.c is the client's tools/call
	own              *proxy.Call // the call upstream, the proxy's own request
	status, message  string
	created, updated time.Time
	ttl, poll        time.Duration
	// result is the task's answer, once terminal: the tool's result (a
	// JSON object), or errObj, the error the server answered.
	result, errObj json.RawMessage
	waiting        []*proxy.Call // the client's tasks/result calls, held until terminal
	// asks are the server's requests during the task that no tasks/result
	// has carried to the client yet: the task is input_required meanwhile.
	asks   [][]byte
	expiry Timer
	entry  *hostedEntry // its place in the Engine's bound
	// v2: the task is 2026-07-28's tasks extension's (its client declared
	// it on the call), whose shapes differ; served: the client has its task
	// (under task_after, a call answered sooner gets its plain answer, and
	// no task ever shows).
	v2, served bool
	after      Timer
	// several: the task's call came without a session, which several
	// clients share; principal, the digest of its credential. Only a
	// request of the same principal sees the task.
	several   bool
	principal string
	// params and token are the call's params as the server gets them and
	// its progress token, for the call sent again with the client's input
	// (2026-07-28: a result input_required); inputs are the input requests
	// the client has not answered yet, by key, answers its answers so far
	// (tasks/update), state the result's requestState, sent back with them.
	params  json.RawMessage
	token   framing.ID
	inputs  map[string]json.RawMessage
	answers map[string]json.RawMessage
	state   json.RawMessage
}

// terminal reports whether the task is over.
func (h *hosted) terminal() bool {
	return h.status == taskCompleted || h.status == taskFailed || h.status == taskCancelled
}

// taskView is a task as the protocol shows it.
type taskView struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage,omitempty"`
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	TTL           int64  `json:"ttl"`
	PollInterval  int64  `json:"pollInterval"`
}

// taskView2 is a task as 2026-07-28's tasks extension shows it: flat, its
// durations in ms under their new names, the result or error inlined once
// there is one.
type taskView2 struct {
	ResultType     string          `json:"resultType"`
	TaskID         string          `json:"taskId"`
	Status         string          `json:"status"`
	StatusMessage  string          `json:"statusMessage,omitempty"`
	CreatedAt      string          `json:"createdAt"`
	LastUpdatedAt  string          `json:"lastUpdatedAt"`
	TTLMs          int64           `json:"ttlMs"`
	PollIntervalMs int64           `json:"pollIntervalMs"`
	Result         json.RawMessage `json:"result,omitempty"`
	Error          json.RawMessage `json:"error,omitempty"`
	InputRequests  json.RawMessage `json:"inputRequests,omitempty"`
}

// view2 is h as the tasks extension shows it: resultType "task" for the
// call's answer, "complete" for tasks/get's, which inlines the outcome.
func (h *hosted) view2(resultType string) taskView2 {
	v := h.view()
	t := taskView2{ResultType: resultType, TaskID: v.TaskID, Status: v.Status, StatusMessage: v.StatusMessage, CreatedAt: v.CreatedAt,
		LastUpdatedAt: v.LastUpdatedAt, TTLMs: v.TTL, PollIntervalMs: v.PollInterval}
	if resultType == "complete" {
		t.Result, t.Error = h.result, h.errObj
		if h.status == taskInputRequired && len(h.inputs) > 0 {
			t.InputRequests, _ = json.Marshal(h.inputs)
		}
	}
	return t
}

// view is h as the protocol shows it.
func (h *hosted) view() taskView {
	return taskView{TaskID: h.id, Status: h.status, StatusMessage: h.message, CreatedAt: h.created.UTC().Format(time.RFC3339Nano),
		LastUpdatedAt: h.updated.UTC().Format(time.RFC3339Nano), TTL: h.ttl.Milliseconds(), PollInterval: h.poll.Milliseconds()}
}

// newTaskID mints an unguessable task id.
func newTaskID() string {
	var b [16]byte
	rand.Read(b[:])
	return "mcp-cancel-proxy-task-" + hex.EncodeToString(b[:])
}

// admitHosting is Admit for what hosting tasks changes: the answers to
// initialize and tools/list are rewritten; a task-augmented call of a
// task: host tool is hosted; the tasks/* requests naming a hosted task
// are served. It reports false for a request it leaves to Admit.
func (g *governor) admitHosting(c *proxy.Call, m *framing.Message) (proxy.Admission, bool) {
	switch m.Method {
	case framing.MethodInitialize:
		g.initialize(m)
		return proxy.Admission{Rewrite: true}, true
	case "tools/list":
		a := g.admit(c, m)
		a.Rewrite = true
		return a, true
	case "tools/call":
		if m.HasTask || declaresTasks(m) {
			return g.host(c, m)
		}
	case "server/discover":
		a := g.admit(c, m)
		a.Rewrite = true
		return a, true
	case "tasks/update":
		return g.serveTasks(c, m)
	case "tasks/get", "tasks/result", "tasks/cancel", "tasks/list":
		return g.serveTasks(c, m)
	}
	return proxy.Admission{}, false
}

// host hosts the task-augmented call c (m) if its rule says so and the
// server does not run the tool as a task itself.
func (g *governor) host(c *proxy.Call, m *framing.Message) (proxy.Admission, bool) {
	tool, token := m.Name(), c.Token()
	rule := g.e.m.Load().match("tools/call", tool)
	params, task, ok := withoutTask(field(m.Raw, "params"))
	principal, several := g.act.Principal(c)
	g.mu.Lock()
	defer g.mu.Unlock()
	if !rule.TaskHost || g.closed || g.serverTools[tool] || !ok || !m.HasTask && g.runsTasksExt() {
		return proxy.Admission{}, false
	}
	now := g.e.clock.Now()
	ttl := rule.TaskTTL
	var asked struct {
		TTL *int64 `json:"ttl"`
	}
	if json.Unmarshal(task, &asked) == nil && asked.TTL != nil && *asked.TTL > 0 {
		ttl = min(ttl, time.Duration(*asked.TTL)*time.Millisecond)
	}
	h := &hosted{id: g.e.taskID(), status: taskWorking, created: now, updated: now, ttl: ttl, poll: rule.TaskPoll, v2: !m.HasTask,
		several: several, principal: principal, params: params, token: token}
	if !g.e.hostedTasks.admit(h, g) {
		g.log.Warn("too many hosted tasks: the call is refused", zap.String("tool", tool), zap.Stringer("id", c.ID()))
		reply := framing.AppendErrorResponse(nil, c.ID(), framing.ErrorObject{Code: -32603,
			Message: "the proxy holds as many tasks as it may (limits.hosted_tasks): try again later", Data: map[string]string{"proxy": "mcp-cancel-proxy"}})
		g.work.post(func() { g.act.Serve(c, reply) })
		return proxy.Admission{Hold: true}, true
	}
	h.rec = &record{g: g, c: c, rule: rule, method: "tools/call", tool: tool, id: c.ID().AppendJSON(nil), started: now,
		st: story{sent: true}, taskID: h.id}
	if rule.hasHooks() || g.e.opts.Audit.IncludeArguments {
		h.rec.args = field(m.Raw, "params", "arguments")
	}
	if len(rule.Correlate) > 0 {
		h.rec.correlation = correlate(rule.Correlate, field(m.Raw, "params"))
	}
	if g.tasks == nil {
		g.tasks = map[string]*hosted{}
	}
	g.tasks[h.id] = h
	if several {
		g.e.sessionless.Store(h.id, h)
	}
	g.calls[c] = h.rec // its story, settled with the session's (the client's call is served: no other event comes for it)
	h.expiry = g.e.clock.AfterFunc(ttl, func() { g.work.post(func() { g.taskExpired(h) }) })
	if rule.Timeout > 0 {
		r := h.rec
		r.deadline = now.Add(rule.Timeout)
		g.rearmLocked(&r.timer, &r.gen, r.deadline, func(gen int) { g.hostedDeadline(h, gen) })
	}
	g.log.Info("hosting a task for a call the server runs plainly", events.Mark(events.TaskHosted), zap.String("tool", tool),
		zap.Stringer("id", c.ID()), zap.String("task", h.id))
	after := rule.TaskAfter
	if !h.v2 {
		after = 0 // the client asked for a task: it gets one at once
	}
	g.work.post(func() {
		// At once, the client has its task before the call goes: a server
		// that answers within the instant must not have its answer taken
		// for one that came before task_after.
		if after == 0 && !g.giveTask(h) {
			return // the client cancelled its call as it was hosted: it never goes
		}
		own := g.act.SendOwn("tools/call", params, token, func(a *framing.Message) { g.hostedAnswered(h, a) })
		g.mu.Lock()
		h.own = own
		if after > 0 {
			h.after = g.e.clock.AfterFunc(after, func() { g.work.post(func() { g.giveTask(h) }) })
		}
		cancelled, source, reason := h.status == taskCancelled, h.rec.source, h.message // meanwhile, with no call to stop then
		g.mu.Unlock()
		if cancelled {
			g.act.CancelOwn(own, source, reason)
		}
	})
	return proxy.Admission{Hold: true}, true
}

// giveTask answers h's call with its task, unless it was answered; it
// reports false if the client cancelled the call first (h is then
// cancelled).
func (g *governor) giveTask(h *hosted) bool {
	g.mu.Lock()
	if h.served {
		g.mu.Unlock()
		return true
	}
	h.served = true
	var created []byte
	if h.v2 {
		created, _ = json.Marshal(h.view2("task"))
	} else {
		created, _ = json.Marshal(struct {
			Task taskView `json:"task"`
		}{h.view()})
	}
	c := h.rec.c
	g.mu.Unlock()
	if !g.act.Serve(c, answerWith(c.ID(), created)) { // the client cancelled its call as it was hosted
		g.cancelHosted(h, proxy.SourceClient, "the client cancelled its call before it got the task")
		return false
	}
	return true
}

// declaresTasks reports whether a request declares 2026-07-28's tasks
// extension in its _meta's client capabilities.
func declaresTasks(m *framing.Message) bool {
	meta := m.MetaSpan // only _meta is read, where the parse found it: never the call's arguments
	return meta.Found() && len(field(m.Raw[meta.Start:meta.End], metaClientCaps, "extensions", extTasks)) > 0
}

// Keys of 2026-07-28's _meta and of its tasks extension.
const (
	metaClientCaps  = "io.modelcontextprotocol/clientCapabilities"
	metaProtocolRev = "io.modelcontextprotocol/protocolVersion"
	extTasks        = "io.modelcontextprotocol/tasks"
)

// withoutTask returns params without its task member, for the server,
// which runs the tool plainly, and that member (what the client asked of
// its task).
func withoutTask(params json.RawMessage) (out, task []byte, ok bool) {
	var obj map[string]json.RawMessage
	if json.Unmarshal(params, &obj) != nil {
		return nil, nil, false
	}
	task = obj["task"]
	for k := range obj { // and any spelling of it a server that ignores case would read
		if strings.EqualFold(k, "task") {
			delete(obj, k)
		}
	}
	// Nor does it learn that the client takes tasks (2026-07-28): it runs
	// the call plainly for the proxy.
	var meta map[string]json.RawMessage
	if json.Unmarshal(obj["_meta"], &meta) == nil && meta[metaClientCaps] != nil {
		var caps map[string]json.RawMessage
		var exts map[string]json.RawMessage
		if json.Unmarshal(meta[metaClientCaps], &caps) == nil && json.Unmarshal(caps["extensions"], &exts) == nil && exts[extTasks] != nil {
			delete(exts, extTasks)
			caps["extensions"], _ = json.Marshal(exts)
			meta[metaClientCaps], _ = json.Marshal(caps)
			obj["_meta"], _ = json.Marshal(meta)
		}
	}
	out, err := json.Marshal(obj)
	return out, task, err == nil
}

// answerWith is the answer to id with result res.
func answerWith(id framing.ID, res []byte) []byte {
	dst := append([]byte(`{"jsonrpc":"2.0","id":`), id.AppendJSON(nil)...)
	dst = append(dst, `,"result":`...)
	dst = append(dst, res...)
	return append(dst, '}')
}

// unknownTask is the answer to a tasks/* request naming no task the
// proxy or the server knows.
func unknownTask(id framing.ID, why string) []byte {
	return framing.AppendErrorResponse(nil, id, framing.ErrorObject{Code: -32602, Message: why})
}

// hostedAnswered takes the server's answer to a hosted task's call: the
// task is over, and the tasks/result calls waiting on it are answered;
// after a cancel, it is the call's late answer.
func (g *governor) hostedAnswered(h *hosted, m *framing.Message) {
	g.mu.Lock()
	r := h.rec
	if h.status == taskCancelled {
		var out []effect
		if r.st.phase == phaseCancelled {
			out = g.lateLocked(r, m)
		}
		g.mu.Unlock()
		g.run(r, out)
		return
	}
	if h.terminal() { // dropped by the bound, or the session ended
		g.mu.Unlock()
		return
	}
	if !h.served { // answered before task_after: the client gets the plain answer, and never sees a task
		h.served, h.status = true, taskCompleted
		if h.after != nil {
			h.after.Stop()
		}
		c := h.rec.c
		reply := framing.Splice(nil, m.Raw, m.IDSpan, c.ID())
		out := g.stepLocked(r, event{kind: evAnswered, at: g.e.clock.Now()})
		if r.timer != nil {
			r.timer.Stop()
		}
		g.mu.Unlock()
		g.run(r, out)
		g.work.post(func() { g.act.Serve(c, reply) })
		g.work.post(func() { g.forgetHosted(h) })
		return
	}
	if h.v2 && !m.IsError && string(field(m.Raw, "result", "resultType")) == `"input_required"` {
		g.awaitInputLocked(h, field(m.Raw, "result"))
		g.mu.Unlock()
		return
	}
	h.status, h.updated = taskCompleted, g.e.clock.Now()
	if m.IsError {
		h.status, h.errObj = taskFailed, json.RawMessage(field(m.Raw, "error"))
		h.message = "the server answered the call with an error"
	} else {
		h.result = json.RawMessage(field(m.Raw, "result"))
		if len(r.rule.Capture) > 0 {
			r.capture(h.result)
		}
	}
	if r.timer != nil {
		r.timer.Stop()
	}
	out := g.stepLocked(r, event{kind: evAnswered, at: h.updated})
	waiting := h.waiting
	h.waiting = nil
	g.mu.Unlock()
	g.run(r, out)
	g.e.hostedTasks.grew(h, len(h.result)+len(h.errObj))
	for _, w := range waiting {
		g.work.post(func() { g.act.Serve(w, g.taskResult(h, w.ID())) })
	}
}

// FromOwn implements proxy.OwnMessages: a message the server sent on the
// stream of a hosted task's call (a Streamable HTTP upstream), which no
// stream of the client's carries, goes on the tasks/result the client
// waits on: a request (an elicitation, a sampling) tagged with the task's
// related-task _meta, the task input_required until a tasks/result has
// carried it (2025-11-25's flow: input_required tells the client to ask
// tasks/result); a notification (progress) if one waits, else nowhere. A
// 2026-07-28 task has no tasks/result: its server asks for input in its
// result (input_required, not hosted: docs/tasks.md), and a request is
// dropped, said in the log.
func (g *governor) FromOwn(own *proxy.Call, frame []byte) {
	var f framing.Frame
	if f.Parse(frame) != nil || f.Batch {
		return
	}
	m := &f.Msgs[0]
	g.mu.Lock()
	defer g.mu.Unlock()
	var h *hosted
	for _, t := range g.tasks {
		if t.own == own {
			h = t
		}
	}
	switch {
	case h == nil || h.terminal():
	case m.Kind == framing.KindRequest && h.v2:
		g.log.Warn("a server's request during a 2026-07-28 task the proxy hosts has no way to its client: dropped",
			zap.String("task", h.id), zap.String("method", m.Method))
	case m.Kind == framing.KindRequest:
		tagged := editObject(frame, []string{"params", "_meta"}, func(meta map[string]json.RawMessage) bool {
			meta[metaRelatedTask], _ = json.Marshal(map[string]string{"taskId": h.id})
			return true
		})
		if tagged == nil {
			tagged = frame
		}
		h.asks = append(h.asks, tagged)
		h.status, h.message, h.updated = taskInputRequired, "the server asks the client for input ("+m.Method+"): tasks/result carries it", g.e.clock.Now()
		g.passAsksLocked(h)
	default:
		for _, w := range h.waiting {
			g.work.post(func() { g.act.Notify(w, frame) })
		}
	}
}

// passAsksLocked carries the server's requests of h to the client on the
// first tasks/result waiting, if one is: the task is working again.
func (g *governor) passAsksLocked(h *hosted) {
	if len(h.asks) == 0 || len(h.waiting) == 0 {
		return
	}
	w, asks := h.waiting[0], h.asks
	h.asks = nil
	h.status, h.message, h.updated = taskWorking, "", g.e.clock.Now()
	g.work.post(func() {
		for _, a := range asks {
			g.act.Notify(w, a)
		}
	})
}

// taskResult is the answer to a tasks/result of h, terminal: the tool's
// result tagged with its task, the server's error, or an error saying the
// task was cancelled.
func (g *governor) taskResult(h *hosted, id framing.ID) []byte {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case h.errObj != nil:
		dst := append([]byte(`{"jsonrpc":"2.0","id":`), id.AppendJSON(nil)...)
		dst = append(dst, `,"error":`...)
		dst = append(dst, h.errObj...)
		return append(dst, '}')
	case h.result != nil:
		var obj map[string]json.RawMessage
		if json.Unmarshal(h.result, &obj) != nil {
			return answerWith(id, h.result)
		}
		var meta map[string]json.RawMessage
		json.Unmarshal(obj["_meta"], &meta)
		if meta == nil {
			meta = map[string]json.RawMessage{}
		}
		meta[metaRelatedTask], _ = json.Marshal(map[string]string{"taskId": h.id})
		obj["_meta"], _ = json.Marshal(meta)
		b, _ := json.Marshal(obj)
		return answerWith(id, b)
	}
	return framing.AppendErrorResponse(nil, id, framing.ErrorObject{Code: -32603, Message: "the task was " + h.status + ": it has no result",
		Data: map[string]string{"proxy": "mcp-cancel-proxy", "taskId": h.id, "status": h.status}})
}

// serveTasks serves a tasks/* request naming a task the proxy hosts for
// the session (tasks/list: all of them, when the server keeps none).
func (g *governor) serveTasks(c *proxy.Call, m *framing.Message) (proxy.Admission, bool) {
	var p struct {
		TaskID string `json:"taskId"`
	}
	json.Unmarshal(field(m.Raw, "params"), &p)
	v2 := false
	if meta := m.MetaSpan; meta.Found() && len(field(m.Raw[meta.Start:meta.End], metaProtocolRev)) > 0 { // 2026-07-28: the tasks extension's rules
		v2 = true
		if hg := g.hostOf(c, p.TaskID); hg != nil {
			return hg.serveFor(g, c, m, p.TaskID)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return proxy.Admission{}, false
	}
	if v2 {
		return g.serveTasks2Locked(g, c, m, p.TaskID)
	}
	if m.Method == "tasks/update" {
		return proxy.Admission{}, false
	}
	if m.Method == "tasks/list" {
		if g.serverTaskList {
			return proxy.Admission{}, false // the server's own list; the hosted tasks are not in it (docs/tasks.md)
		}
		views := []taskView{}
		for _, h := range g.tasks {
			views = append(views, h.view())
		}
		sortViews(views)
		b, _ := json.Marshal(struct {
			Tasks []taskView `json:"tasks"`
		}{views})
		reply := answerWith(c.ID(), b)
		g.work.post(func() { g.act.Serve(c, reply) })
		return proxy.Admission{Hold: true}, true
	}
	h := g.tasks[p.TaskID]
	if h == nil {
		if g.serverTasks {
			return proxy.Admission{}, false // the server's task, or none: the server says
		}
		reply := unknownTask(c.ID(), "no task "+cut(p.TaskID, 100)+": unknown, expired or dropped")
		g.work.post(func() { g.act.Serve(c, reply) })
		return proxy.Admission{Hold: true}, true
	}
	switch m.Method {
	case "tasks/get":
		b, _ := json.Marshal(h.view())
		reply := answerWith(c.ID(), b)
		g.work.post(func() { g.act.Serve(c, reply) })
	case "tasks/result":
		if !h.terminal() {
			h.waiting = append(h.waiting, c)
			g.passAsksLocked(h)
			break
		}
		g.work.post(func() { g.act.Serve(c, g.taskResult(h, c.ID())) })
	case "tasks/cancel":
		if h.terminal() {
			reply := unknownTask(c.ID(), "task "+h.id+" is already "+h.status)
			g.work.post(func() { g.act.Serve(c, reply) })
			break
		}
		g.markCancelledLocked(h, "cancelled by the client (tasks/cancel)")
		b, _ := json.Marshal(h.view())
		reply := answerWith(c.ID(), b)
		g.work.post(func() {
			g.act.Serve(c, reply) // the task is cancelled before the answer says so
			g.cancelHosted(h, proxy.SourceTaskCancel, "tasks/cancel of task "+h.id)
		})
	}
	return proxy.Admission{Hold: true}, true
}

// hostOf returns the governor of another request without a session that
// hosts task id for c's principal, if one does.
func (g *governor) hostOf(c *proxy.Call, id string) *governor {
	v, ok := g.e.sessionless.Load(id)
	if !ok {
		return nil
	}
	h := v.(*hosted)
	principal, several := g.act.Principal(c)
	if hg := h.rec.g; hg != g && several && principal == h.principal {
		return hg
	}
	return nil
}

// serveFor serves c, a 2026-07-28 tasks/* request of via's naming a
// task g hosts: the answer goes on via's request, the cancel from g.
func (g *governor) serveFor(via *governor, c *proxy.Call, m *framing.Message, id string) (proxy.Admission, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.serveTasks2Locked(via, c, m, id)
}

// serveTasks2Locked serves a 2026-07-28 tasks/* request (the tasks
// extension's) naming a task the proxy hosts, or refuses what the
// extension does not have: tasks/result and tasks/list are gone, and a
// request that does not declare the extension gets -32021. Requests the
// server may know better (it runs tasks itself) go to it. The answer goes
// on via's request (g's own, or another request's without a session).
func (g *governor) serveTasks2Locked(via *governor, c *proxy.Call, m *framing.Message, id string) (proxy.Admission, bool) {
	h := g.tasks[id]
	if h != nil && h.several {
		if principal, _ := via.act.Principal(c); principal != h.principal {
			h = nil // another client's: as if unknown
		}
	}
	if h == nil && (g.runsTasksExt() || g.serverTasks) && via == g {
		return proxy.Admission{}, false
	}
	var reply []byte
	switch {
	case m.Method == "tasks/result" || m.Method == "tasks/list":
		reply = framing.AppendErrorResponse(nil, c.ID(), framing.ErrorObject{Code: -32601,
			Message: m.Method + " is not a method of the 2026-07-28 tasks extension: tasks/get carries the result"})
	case !declaresTasks(m):
		reply = framing.AppendErrorResponse(nil, c.ID(), framing.ErrorObject{Code: -32021,
			Message: "missing required client capability: the request does not declare the " + extTasks + " extension",
			Data:    json.RawMessage(`{"requiredCapabilities":{"extensions":{"` + extTasks + `":{}}}}`)})
	case h == nil:
		reply = unknownTask(c.ID(), "no task "+cut(id, 100)+": unknown, expired or dropped")
	case m.Method == "tasks/get":
		b, _ := json.Marshal(h.view2("complete"))
		reply = answerWith(c.ID(), b)
	case m.Method == "tasks/update":
		reply = g.updateLocked(h, c, m)
	case m.Method == "tasks/cancel":
		reply = answerWith(c.ID(), []byte(`{"resultType":"complete"}`)) // an acknowledgement, for a task over too
		if !h.terminal() {
			g.markCancelledLocked(h, "cancelled by the client (tasks/cancel)")
			cancel := func() { g.cancelHosted(h, proxy.SourceTaskCancel, "tasks/cancel of task "+h.id) }
			via.work.post(func() {
				via.act.Serve(c, reply) // the task is cancelled before the answer says so, and cancelled upstream after
				if via == g {
					cancel()
				} else {
					g.work.post(cancel)
				}
			})
			return proxy.Admission{Hold: true}, true
		}
	}
	via.work.post(func() { via.act.Serve(c, reply) })
	return proxy.Admission{Hold: true}, true
}

// awaitInputLocked makes h input_required: the server answered its call
// (2026-07-28) with an input_required result, whose inputRequests the
// client reads on tasks/get and answers with tasks/update. No call is in
// flight meanwhile; the task's story goes on (a cancel, its ttl, a
// deadline still end it).
func (g *governor) awaitInputLocked(h *hosted, result json.RawMessage) {
	var res struct {
		InputRequests map[string]json.RawMessage `json:"inputRequests"`
		RequestState  json.RawMessage            `json:"requestState"`
	}
	json.Unmarshal(result, &res)
	h.own, h.inputs, h.answers, h.state = nil, res.InputRequests, map[string]json.RawMessage{}, res.RequestState
	h.rec.awaiting = true
	h.status, h.updated = taskInputRequired, g.e.clock.Now()
	h.message = "the server asks the client for input: tasks/get has its inputRequests, tasks/update takes the answers"
}

// updateLocked takes a 2026-07-28 tasks/update of h: the client's answers
// to the server's input requests, acknowledged; once every one pending is
// answered, the call goes to the server again with them (and the result's
// requestState), and the task works on.
func (g *governor) updateLocked(h *hosted, c *proxy.Call, m *framing.Message) []byte {
	var p struct {
		InputResponses map[string]json.RawMessage `json:"inputResponses"`
	}
	if h.status != taskInputRequired {
		return unknownTask(c.ID(), "task "+h.id+" is "+h.status+", not waiting for input")
	}
	if json.Unmarshal(field(m.Raw, "params"), &p) != nil || p.InputResponses == nil {
		return unknownTask(c.ID(), "tasks/update carries no inputResponses object")
	}
	for key, answer := range p.InputResponses {
		if _, asked := h.inputs[key]; asked {
			delete(h.inputs, key)
			h.answers[key] = answer
		}
	}
	if len(h.inputs) == 0 {
		params := editObject(h.params, nil, func(obj map[string]json.RawMessage) bool {
			obj["inputResponses"], _ = json.Marshal(h.answers)
			if len(h.state) > 0 {
				obj["requestState"] = h.state
			}
			return true
		})
		h.status, h.message, h.updated, h.answers, h.state = taskWorking, "", g.e.clock.Now(), nil, nil
		h.rec.awaiting = false
		g.work.post(func() {
			own := g.act.SendOwn("tools/call", params, h.token, func(a *framing.Message) { g.hostedAnswered(h, a) })
			g.mu.Lock()
			h.own = own
			cancelled := h.status == taskCancelled // meanwhile, with no call to stop then
			g.mu.Unlock()
			if cancelled {
				g.act.CancelOwn(own, proxy.SourceTaskCancel, "the task was cancelled")
			}
		})
	}
	return answerWith(c.ID(), []byte(`{"resultType":"complete"}`))
}

// markCancelledLocked sets h cancelled, now, before any answer says so.
func (g *governor) markCancelledLocked(h *hosted, why string) {
	h.status, h.message, h.updated = taskCancelled, why, g.e.clock.Now()
}

// cancelHosted cancels h's call upstream, as from source, as any cancel
// would: its story goes on (hooks, the wait for a late answer, the audit
// line), and the tasks/result calls waiting on it get the cancelled
// task's answer.
func (g *governor) cancelHosted(h *hosted, source proxy.Source, reason string) {
	g.mu.Lock()
	r := h.rec
	if r.st.phase != phaseInFlight {
		g.mu.Unlock()
		return
	}
	if !h.terminal() {
		g.markCancelledLocked(h, reason)
	}
	out := g.cancelLocked(r, source, reason)
	own, waiting := h.own, h.waiting
	h.waiting = nil
	g.mu.Unlock()
	g.run(r, out)
	if own != nil {
		g.act.CancelOwn(own, source, reason)
	}
	for _, w := range waiting {
		g.act.Serve(w, g.taskResult(h, w.ID()))
	}
	g.work.post(func() { g.afterCancel(r) })
}

// CancelOwnWork implements proxy.OwnWork: the calls of the hosted tasks
// still working are cancelled upstream, as from source (a shutdown, the
// session's end), while the server can still hear it.
func (g *governor) CancelOwnWork(source proxy.Source, why string) {
	g.mu.Lock()
	var working []*hosted
	for _, h := range g.tasks {
		if !h.terminal() {
			working = append(working, h)
		}
	}
	g.mu.Unlock()
	for _, h := range working {
		g.cancelHosted(h, source, why)
	}
}

// hostedDeadline cancels h's call at its rule's deadline.
func (g *governor) hostedDeadline(h *hosted, gen int) {
	g.mu.Lock()
	stale := gen != h.rec.gen || h.terminal() || g.closed
	g.mu.Unlock()
	if stale {
		return
	}
	g.e.metrics.DeadlineFired()
	g.cancelHosted(h, proxy.SourceDeadline, fmt.Sprintf("deadline of %v passed (rule %s)", h.rec.rule.Timeout, h.rec.rule.Name))
}

// taskExpired ends h at its ttl: a task still working is cancelled
// upstream; the task is forgotten, its result with it.
func (g *governor) taskExpired(h *hosted) {
	g.mu.Lock()
	working := !h.terminal() && !g.closed
	g.mu.Unlock()
	if working {
		g.cancelHosted(h, proxy.SourceTaskTTL, fmt.Sprintf("the task's ttl of %v passed", h.ttl))
	}
	g.forgetHosted(h)
}

// forgetHosted drops h: a tasks/* naming it is answered as for an
// unknown task.
func (g *governor) forgetHosted(h *hosted) {
	g.mu.Lock()
	if g.tasks[h.id] == h {
		delete(g.tasks, h.id)
	}
	if h.expiry != nil {
		h.expiry.Stop()
	}
	var done func()
	if len(g.tasks) == 0 {
		done, g.linger = g.linger, nil
	}
	g.mu.Unlock()
	g.e.sessionless.CompareAndDelete(h.id, h)
	g.e.hostedTasks.remove(h)
	if done != nil {
		done()
	}
}

// Linger implements proxy.Lingerer: a session that hosts tasks outlasts
// its request until the last of them is forgotten (its ttl passed, or the
// bound dropped it).
func (g *governor) Linger(done func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed || len(g.tasks) == 0 {
		return false
	}
	g.linger = done
	return true
}

// closeHosted ends the session's hosted tasks with it, and forgets them:
// those still working are cancelled (source session_end) upstream, as a
// client's call would be, their hooks run and their audit lines written
// as they stand.
func (g *governor) closeHosted() {
	g.mu.Lock()
	g.linger = nil // the session ends already
	all := make([]*hosted, 0, len(g.tasks))
	type todo struct {
		r   *record
		out []effect
	}
	var runs []todo
	var owns []*proxy.Call
	for _, h := range g.tasks {
		all = append(all, h)
		if r := h.rec; !h.terminal() && r.st.phase == phaseInFlight {
			if h.own != nil {
				owns = append(owns, h.own)
			}
			g.markCancelledLocked(h, "its session ended")
			out := g.cancelLocked(r, proxy.SourceSessionEnd, "its session ended")
			out = append(out, g.stepLocked(r, r.handled())...)
			runs = append(runs, todo{r, append(out, g.stepLocked(r, event{kind: evClosed})...)})
		}
	}
	g.mu.Unlock()
	for _, t := range runs {
		g.run(t.r, t.out)
	}
	for _, own := range owns {
		g.act.CancelOwn(own, proxy.SourceSessionEnd, "its session ended")
	}
	for _, h := range all {
		g.forgetHosted(h)
	}
}

// RewriteResult implements proxy.Rewriter: the server's answer to
// initialize declares tasks, and its tools/list says that the tools of
// task: host rules support them.
func (g *governor) RewriteResult(c *proxy.Call, m *framing.Message) []byte {
	switch c.Method() {
	case framing.MethodInitialize:
		return declareTasks(field(m.Raw, "result"))
	case "tools/list":
		return g.markTaskTools(field(m.Raw, "result"))
	case "server/discover":
		return g.declareTasksExtension(field(m.Raw, "result"))
	}
	return nil
}

// declareTasksExtension adds 2026-07-28's tasks extension to a
// server/discover result's capabilities, and notes whether the server
// declared it itself (then it runs its tasks, and nothing is hosted).
func (g *governor) declareTasksExtension(res json.RawMessage) []byte {
	declared := false
	out := editObject(res, []string{"capabilities", "extensions"}, func(exts map[string]json.RawMessage) bool {
		if declared = exts[extTasks] != nil; declared {
			return false
		}
		exts[extTasks] = json.RawMessage(`{}`)
		return true
	})
	if declared {
		g.mu.Lock()
		g.serverTasksExt = true
		g.e.tasksExt.Store(true)
		g.mu.Unlock()
	}
	return out
}

// runsTasksExt reports whether the server runs 2026-07-28's tasks
// extension itself, as this session or any other learned: then its tasks
// are relayed, and nothing is hosted.
func (g *governor) runsTasksExt() bool { return g.serverTasksExt || g.e.tasksExt.Load() }

// declareTasks adds to an initialize result's capabilities what hosting
// tasks serves: tasks.list, tasks.cancel and tasks.requests.tools.call.
func declareTasks(res json.RawMessage) []byte {
	out := editObject(res, []string{"capabilities", "tasks"}, func(tasks map[string]json.RawMessage) bool {
		for _, k := range []string{"list", "cancel"} {
			if tasks[k] == nil {
				tasks[k] = json.RawMessage(`{}`)
			}
		}
		return true
	})
	return editObject(out, []string{"capabilities", "tasks", "requests", "tools"}, func(tools map[string]json.RawMessage) bool {
		if tools["call"] == nil {
			tools["call"] = json.RawMessage(`{}`)
		}
		return true
	})
}

// editObject edits the object at path in doc, a JSON object, with edit,
// making the objects on the way where they are missing, and returns doc
// encoded anew; nil when doc or one on the way is not an object, or edit
// reports nothing to change.
func editObject(doc json.RawMessage, path []string, edit func(map[string]json.RawMessage) bool) []byte {
	var obj map[string]json.RawMessage
	if json.Unmarshal(doc, &obj) != nil || obj == nil {
		return nil
	}
	if len(path) == 0 {
		if !edit(obj) {
			return nil
		}
	} else {
		inner := obj[path[0]]
		if len(inner) == 0 || string(inner) == "null" {
			inner = json.RawMessage(`{}`)
		}
		if obj[path[0]] = editObject(inner, path[1:], edit); obj[path[0]] == nil {
			return nil
		}
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return nil
	}
	return b
}

// markTaskTools marks, in a tools/list result, the tools of task: host
// rules as supporting tasks, and notes those the server runs as tasks
// itself (never hosted twice).
func (g *governor) markTaskTools(res json.RawMessage) []byte {
	var obj map[string]json.RawMessage
	var tools []map[string]json.RawMessage
	if json.Unmarshal(res, &obj) != nil || json.Unmarshal(obj["tools"], &tools) != nil {
		return nil
	}
	mt := g.e.m.Load()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, tool := range tools {
		var name string
		json.Unmarshal(tool["name"], &name)
		var exec map[string]json.RawMessage
		json.Unmarshal(tool["execution"], &exec)
		var support string
		json.Unmarshal(exec["taskSupport"], &support)
		if g.serverTasks && (support == "optional" || support == "required") {
			if g.serverTools == nil {
				g.serverTools = map[string]bool{}
			}
			g.serverTools[name] = true // relayed, as the server's own
			continue
		}
		if !mt.match("tools/call", name).TaskHost {
			continue
		}
		if exec == nil {
			exec = map[string]json.RawMessage{}
		}
		exec["taskSupport"] = json.RawMessage(`"optional"`)
		tool["execution"], _ = json.Marshal(exec)
	}
	obj["tools"], _ = json.Marshal(tools)
	b, err := json.Marshal(obj)
	if err != nil {
		return nil
	}
	return b
}

// sortViews orders tasks by creation, then id.
func sortViews(vs []taskView) {
	slices.SortFunc(vs, func(a, b taskView) int {
		return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), cmp.Compare(a.TaskID, b.TaskID))
	})
}

// Defaults of Options.TaskMemory and HostedTasks.
const (
	DefaultTaskMemory  = 64 << 20
	DefaultHostedTasks = 1024
)

// hostedBound bounds the tasks hosted across the process: in entries (all
// of them, working or not) and in the bytes of their results, the oldest
// terminal task dropped first. A task over the entries with none terminal
// to drop is refused.
type hostedBound struct {
	maxBytes   int64
	maxEntries int
	metrics    Metrics

	mu      sync.Mutex // guards the fields below; taken after a governor's, never before
	bytes   int64
	entries int
	order   list.List // of *hostedEntry, terminal tasks, oldest first
}

// hostedEntry is a hosted task as the bound counts it.
type hostedEntry struct {
	h     *hosted
	g     *governor
	bytes int64
	elem  *list.Element // in order, once terminal
}

// admit counts h, hosted for g, if the entries allow (dropping the oldest
// terminal task if need be; the drop runs later, off g's lock).
func (b *hostedBound) admit(h *hosted, g *governor) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.entries >= b.maxEntries {
		front := b.order.Front()
		if front == nil {
			return false
		}
		b.dropLocked(front.Value.(*hostedEntry))
	}
	h.entry = &hostedEntry{h: h, g: g}
	b.entries++
	b.metrics.TasksHosted(b.bytes, b.entries)
	return true
}

// grew counts h, now terminal, with n bytes of result, and drops the
// oldest terminal tasks beyond the bound in bytes.
func (b *hostedBound) grew(h *hosted, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := h.entry
	if e == nil || e.elem != nil {
		return
	}
	e.bytes = int64(n)
	b.bytes += e.bytes
	e.elem = b.order.PushBack(e)
	for b.bytes > b.maxBytes && b.order.Len() > 0 {
		b.dropLocked(b.order.Front().Value.(*hostedEntry))
	}
	b.metrics.TasksHosted(b.bytes, b.entries)
}

// dropLocked uncounts e, a terminal task, and has its governor forget it.
func (b *hostedBound) dropLocked(e *hostedEntry) {
	b.uncountLocked(e)
	b.metrics.TaskDropped()
	e.g.work.post(func() { e.g.forgetHosted(e.h) }) // off the bound's lock, and off the caller's governor's
}

// remove uncounts h, if it is counted.
func (b *hostedBound) remove(h *hosted) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h.entry != nil {
		b.uncountLocked(h.entry)
		b.metrics.TasksHosted(b.bytes, b.entries)
	}
}

func (b *hostedBound) uncountLocked(e *hostedEntry) {
	if e.h.entry != e {
		return
	}
	e.h.entry = nil
	b.entries--
	if e.elem != nil {
		b.order.Remove(e.elem)
		b.bytes -= e.bytes
	}
}

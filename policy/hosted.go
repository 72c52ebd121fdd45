package policy

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
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
	waiting        []*proxy.Call // the client's tasks/result calls, held until terminal (and in governor.polls)
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
	// expired: its ttl passed; it is being cancelled and forgotten, and a
	// tasks/* request naming it is answered as for an unknown task
	// (listedLocked) from that moment, not from the moment it is gone.
	expired bool
	after   Timer
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
	owner, peer := g.act.Owner(c)
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
	if key := g.e.hostedTasks.admit(h, g, owner, peer); key != "" {
		whose := "as many tasks as it may"
		if key == keyHostedTasksPerPrincipal {
			whose = "as many tasks for this client as it may"
		}
		g.log().Warn("too many hosted tasks: the call is refused", zap.String("tool", tool), zap.Stringer("id", c.ID()), zap.String("bound", key))
		reply := framing.AppendErrorResponse(nil, c.ID(), framing.ErrorObject{Code: -32603,
			Message: "the proxy holds " + whose + " (" + key + "): try again later", Data: map[string]string{"proxy": "mcp-cancel-proxy", "bound": key}})
		g.serveSoon(c, reply)
		return proxy.Admission{Hold: true}, true
	}
	g.keepHostedLocked(h, c, m, rule)
	g.log().Info("hosting a task for a call the server runs plainly", events.Mark(events.TaskHosted), zap.String("tool", tool),
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
		if after > 0 {
			// Counted from before the call goes, not from after SendOwn
			// returned: a clock that moved meanwhile (the server had the call)
			// delayed the task by as much (a transcript under -cpu 4 never
			// gave it). It is given from this queue, after the send.
			g.mu.Lock()
			h.after = g.e.clock.AfterFunc(after, func() { g.work.post(func() { g.giveTask(h) }) })
			g.mu.Unlock()
		}
		g.sendHosted(h, params)
	})
	return proxy.Admission{Hold: true}, true
}

// keepHostedLocked records h, hosted for the client's call c (m) under
// rule: its story (the audit line, the hooks), the session's and the
// Engine's tables, its ttl and its deadline.
func (g *governor) keepHostedLocked(h *hosted, c *proxy.Call, m *framing.Message, rule *Effective) {
	h.rec = &record{g: g, c: c, rule: rule, method: "tools/call", tool: m.Name(), id: c.ID().AppendJSON(nil), started: h.created,
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
	if h.several {
		g.e.sessionless.Store(h.id, h)
	}
	g.keepLocked(c, h.rec) // its story, settled with the session's (the client's call is served: no other event comes for it)
	h.expiry = g.e.clock.AfterFunc(h.ttl, func() { g.work.post(func() { g.taskExpired(h) }) })
	if rule.Timeout > 0 {
		r := h.rec
		r.deadline = h.created.Add(rule.Timeout)
		g.rearmLocked(&r.timer, &r.gen, r.deadline, func(gen int) { g.hostedDeadline(h, gen) })
	}
}

// sendHosted sends h's call upstream as a request of the proxy's own
// (again, with the client's input, after input_required); a task whose
// story was cancelled meanwhile, with no call to stop then, has it
// cancelled as it goes. A task only marked cancelled (a tasks/cancel whose
// cancelHosted is still queued) is not: that cancelHosted stops the call,
// once, after the client's answer, with the story's source.
func (g *governor) sendHosted(h *hosted, params []byte) {
	g.mu.Lock()
	if h.rec.st.phase == phaseCancelled { // ended before its call went (a shutdown): it never goes
		g.mu.Unlock()
		return
	}
	g.sending++
	g.mu.Unlock()
	own := g.act.SendOwn("tools/call", params, h.token, func(a *framing.Message) { g.hostedAnswered(h, a) })
	g.mu.Lock()
	h.own = own
	g.takeEarlyLocked(h)
	cancelled, source, reason := h.rec.st.phase == phaseCancelled, h.rec.source, h.rec.reason
	g.mu.Unlock()
	if cancelled {
		g.act.CancelOwn(own, source, reason)
	}
}

// takeEarlyLocked hands h what came on the stream of its call before the
// governor knew the call (FromOwn, g.early), and forgets what came for
// other calls of the proxy's own once no hosted call is being sent. g.mu
// is held.
func (g *governor) takeEarlyLocked(h *hosted) {
	early := g.early[h.own]
	delete(g.early, h.own)
	if g.sending--; g.sending == 0 {
		clear(g.early) // no hosted call's: dropped, as FromOwn drops them
	}
	g.sent.Broadcast()
	for _, frame := range early {
		var f framing.Frame
		if f.Parse(frame) == nil && !f.Batch {
			g.fromOwnLocked(h, &f.Msgs[0], frame)
		}
	}
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
	var then func() // what follows, off the lock
	r := h.rec
	switch {
	case h.status == taskCancelled:
		if r.st.phase == phaseCancelled {
			out := g.lateLocked(r, m)
			then = func() { g.run(r, out) }
		}
	case h.terminal(): // dropped by the bound, or the session ended
	case !h.served: // answered before task_after: the client gets the plain answer, and never sees a task
		then = g.plainAnswerLocked(h, m)
	case h.v2 && !m.IsError && string(field(m.Raw, "result", "resultType")) == `"input_required"`:
		g.awaitInputLocked(h, field(m.Raw, "result"))
	default:
		then = g.hostedOverLocked(h, m)
	}
	g.mu.Unlock()
	if then != nil {
		then()
	}
}

// plainAnswerLocked ends h, answered (m) before its task was given: the
// client's call gets the server's answer as it is, and h is forgotten.
// It returns what follows, off the lock.
func (g *governor) plainAnswerLocked(h *hosted, m *framing.Message) func() {
	r := h.rec
	h.served, h.status = true, taskCompleted
	if h.after != nil {
		h.after.Stop()
	}
	if r.timer != nil {
		r.timer.Stop()
	}
	c := r.c
	reply := framing.Splice(nil, m.Raw, m.IDSpan, c.ID())
	out := g.stepLocked(r, event{kind: evAnswered, at: g.e.clock.Now()})
	return func() {
		g.run(r, out)
		g.serveSoon(c, reply)
		g.work.post(func() { g.forgetHosted(h) })
	}
}

// hostedOverLocked ends h with the server's answer m, its result or its
// error: the tasks/result calls waiting on it are answered. It returns
// what follows, off the lock.
func (g *governor) hostedOverLocked(h *hosted, m *framing.Message) func() {
	r := h.rec
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
	waiting := g.takeWaitingLocked(h)
	return func() {
		g.run(r, out)
		g.e.hostedTasks.grew(h, len(h.result)+len(h.errObj))
		for _, w := range waiting {
			g.work.post(func() { g.act.Serve(w, g.taskResult(h, w.ID())) })
		}
	}
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
	own, waiting := h.own, g.takeWaitingLocked(h)
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

// hostingLocked returns the story of the hosted task whose call upstream
// is own, or nil.
func (g *governor) hostingLocked(own *proxy.Call) *record {
	for _, h := range g.tasks {
		if h.own == own {
			return h.rec
		}
	}
	return nil
}

// CancelOwnWork implements proxy.OwnWork: the calls of the hosted tasks
// still working are cancelled upstream, as from source (a shutdown, the
// session's end), while the server can still hear it.
func (g *governor) CancelOwnWork(source proxy.Source, why string) {
	g.mu.Lock()
	// A hosted call being sent is cancelled once SendOwn has returned and
	// its own request is known, here, before the session goes on to end:
	// left to the send's own end, its cancel could come after the
	// session had closed its way to the server (a stdio server over HTTP
	// then ran the call on until it was stopped).
	for g.sending > 0 {
		g.sent.Wait()
	}
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
	h.expired = true
	g.mu.Unlock()
	if working {
		g.cancelHosted(h, proxy.SourceTaskTTL, fmt.Sprintf("the task's ttl of %v passed", h.ttl))
	}
	g.forgetHosted(h)
}

// listedLocked returns the task named id, if the client may still ask
// about it: nil for one unknown, or one whose ttl passed.
func (g *governor) listedLocked(id string) *hosted {
	if h := g.tasks[id]; h != nil && !h.expired {
		return h
	}
	return nil
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

// sortViews orders tasks by creation, then id.
func sortViews(vs []taskView) {
	slices.SortFunc(vs, func(a, b taskView) int {
		return cmp.Or(cmp.Compare(a.CreatedAt, b.CreatedAt), cmp.Compare(a.TaskID, b.TaskID))
	})
}

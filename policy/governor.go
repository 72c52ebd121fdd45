package policy

import (
	"cmp"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// recentMax bounds the answered requests a session remembers, so that a
// cancel coming after the answer is told apart (and a task it names can
// still be cancelled).
const recentMax = 256

// governor is one session's proxy.Governor.
type governor struct {
	e       *Engine
	session string
	act     proxy.Actions
	log     *zap.Logger
	work    *workQueue

	mu          sync.Mutex // guards the fields below and every record's
	calls       map[*proxy.Call]*record
	tools       map[*proxy.Call]string // the tool of each tools/call in flight that has no record
	names       map[string]string      // tool names, interned
	recent      []answered             // the last requests answered, a ring of recentMax, made when first needed
	recentNext  int
	recentIdx   map[framing.ID]int // id -> its place in recent
	tasksCancel bool               // the server declared capabilities.tasks.cancel
	closed      bool
}

// answered is a request the server answered, remembered for a cancel that
// comes after the answer.
type answered struct {
	c    *proxy.Call
	tool string
	rec  *record // its record, when it had one (a task's, say)
}

// record is what the governor knows of one request.
type record struct {
	g        *governor
	c        *proxy.Call
	rule     *Effective
	method   string
	tool     string
	id       json.RawMessage
	args     json.RawMessage
	started  time.Time
	deadline time.Time
	timer    Timer
	gen      int // deadline generation: a timer of an older one is stale
	captured map[string]json.RawMessage

	held, hasSlot bool   // waiting for a slot of its rule; holding one
	lease         func() // frees the fleet-wide slot it holds, if its rule's count is the fleet's
	dispatched    bool   // sent to the server (false while held, or if withdrawn)
	answered      time.Time
	taskID        string

	source, reason string
	cancelled      time.Time
	cancelHandled  bool // hooks for the cancel started (or none to start)
	late           *Late
	windowOver     bool
	lateTimer      Timer
	restartTimer   Timer
	restarted      bool
	taskPending    bool   // a tasks/cancel awaits its answer
	taskCancel     string // how the tasks/cancel ended
	hooksPending   int
	hooks          []HookResult
	written        bool
}

func newGovernor(e *Engine, session string, a proxy.Actions) *governor {
	g := &governor{e: e, session: session, act: a, log: e.log.With(zap.String("scope", session)),
		work: newWorkQueue(), calls: map[*proxy.Call]*record{}}
	// The other maps and the ring are made when first needed: many
	// sessions (a sessionless request is one) see one request.
	e.track(g, true)
	return g
}

// Request implements proxy.Governor.
func (g *governor) Request(c *proxy.Call, m *framing.Message) proxy.Admission {
	if m.Method == framing.MethodInitialize {
		return proxy.Admission{}
	}
	tool, rule := "", (*Effective)(nil)
	if m.Method == "tools/call" {
		g.mu.Lock()
		tool = g.toolNameLocked(m)
		rule = g.e.m.Load().match(m.Method, tool)
		if !rule.active() && !m.HasTask && !g.closed {
			// Nothing to do unless it is cancelled (see Cancelled): no
			// record, no allocation; the tool is noted for the audit line.
			if g.tools == nil {
				g.tools = map[*proxy.Call]string{}
			}
			g.tools[c] = tool
			g.mu.Unlock()
			return proxy.Admission{}
		}
		g.mu.Unlock()
	} else {
		rule = g.e.m.Load().match(m.Method, "")
		if !rule.active() && !m.HasTask {
			return proxy.Admission{} // and nothing to note
		}
	}
	r := &record{g: g, c: c, rule: rule, method: m.Method, tool: tool, id: c.ID().AppendJSON(nil),
		started: g.e.clock.Now(), dispatched: true}
	if rule.hasHooks() || g.e.opts.Audit.IncludeArguments {
		r.args = field(m.Raw, "params", "arguments")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return proxy.Admission{}
	}
	g.calls[c] = r
	a := proxy.Admission{Timed: rule.Timeout > 0,
		WantsLate: rule.OnLateResult != nil || rule.OnLateError != nil || m.HasTask}
	if a.Timed {
		g.armLocked(r, r.started.Add(rule.Timeout))
	}
	if rule.slot != nil {
		if !rule.slot.acquire(r) {
			r.held, r.dispatched = true, false
			g.e.metrics.Waiting(1)
			a.Hold = true
			return a
		}
		r.hasSlot = true
	}
	return a
}

// toolNameLocked returns the tool of a tools/call, interned: the names
// of a session's tools repeat, and looking one up does not allocate.
func (g *governor) toolNameLocked(m *framing.Message) string {
	b := m.NameBytes()
	if b == nil {
		return m.Name() // escaped, or none
	}
	if name, ok := g.names[string(b)]; ok {
		return name
	}
	name := string(b)
	if g.names == nil {
		g.names = map[string]string{}
	}
	if len(g.names) < 1024 {
		g.names[name] = name
	}
	return name
}

// armLocked (re)sets r's deadline.
func (g *governor) armLocked(r *record, at time.Time) {
	if r.timer != nil {
		r.timer.Stop()
	}
	r.gen++
	gen := r.gen
	r.deadline = at
	r.timer = g.e.clock.AfterFunc(at.Sub(g.e.clock.Now()), func() { g.work.post(func() { g.expire(r, gen) }) })
}

// Progress implements proxy.Governor.
func (g *governor) Progress(c *proxy.Call, m *framing.Message) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.calls[c]
	if r == nil || !r.cancelled.IsZero() {
		return
	}
	if len(r.rule.Capture) > 0 {
		r.capture(field(m.Raw, "params"))
	}
	if r.rule.ResetOnProgress && r.timer != nil && r.answered.IsZero() {
		at := g.e.clock.Now().Add(r.rule.Timeout)
		if limit := r.started.Add(r.rule.MaxTimeout); r.rule.MaxTimeout > 0 && at.After(limit) {
			at = limit
		}
		if at.After(r.deadline) {
			g.armLocked(r, at)
		}
	}
}

// Answered implements proxy.Governor.
func (g *governor) Answered(c *proxy.Call, m *framing.Message) {
	g.mu.Lock()
	r := g.calls[c]
	if r == nil {
		tool := g.tools[c]
		delete(g.tools, c)
		g.rememberLocked(answered{c: c, tool: tool})
		g.mu.Unlock()
		return
	}
	delete(g.calls, c)
	r.answered = g.e.clock.Now()
	if m != nil {
		if len(r.rule.Capture) > 0 {
			r.capture(field(m.Raw, "result"))
		}
		if c.HasTask() && m.TaskID != "" {
			r.taskID = m.TaskID // the task runs on: its deadline still holds
		}
	}
	if r.timer != nil && r.taskID == "" {
		r.timer.Stop()
	}
	free := r.releaseLocked()
	g.rememberLocked(answered{c: c, tool: r.tool, rec: r})
	g.mu.Unlock()
	free()
}

// releaseLocked gives up r's place in its rule's queue, or its slot; it
// returns what frees the slot, to be called once unlocked.
func (r *record) releaseLocked() (free func()) {
	switch {
	case r.held:
		r.held = false
		if r.rule.slot.remove(r) {
			r.g.e.metrics.Waiting(-1)
		}
	case r.hasSlot:
		r.hasSlot = false
		s, lease := r.rule.slot, r.lease
		r.lease = nil
		return func() { s.free(lease) }
	}
	return func() {}
}

// handOff gives a freed slot to the next waiting request, of whichever
// session.
func handOff(s *slots) {
	if next := s.release(); next != nil {
		next.g.granted(next, nil)
	}
}

// granted sends a waiting request that got a slot (and, if its rule's
// count is the fleet's, the lease that frees it), unless it was cancelled
// meanwhile, in which case the slot goes on.
func (g *governor) granted(r *record, lease func()) {
	g.mu.Lock()
	ok := r.held && r.cancelled.IsZero()
	r.held = false
	if ok {
		r.hasSlot, r.dispatched, r.lease = true, true, lease
	}
	g.mu.Unlock()
	if !ok {
		r.rule.slot.free(lease)
		return
	}
	g.e.metrics.Waiting(-1)
	g.work.post(func() { g.act.Dispatch(r.c) })
}

// rememberLocked keeps an answered request for a cancel that may follow,
// in place of the oldest one.
func (g *governor) rememberLocked(a answered) {
	if g.recent == nil {
		g.recent, g.recentIdx = make([]answered, recentMax), map[framing.ID]int{}
	}
	slot := g.recentNext
	g.recentNext = (g.recentNext + 1) % recentMax
	if old := g.recent[slot].c; old != nil && g.recentIdx[old.ID()] == slot {
		delete(g.recentIdx, old.ID())
	}
	g.recent[slot] = a
	g.recentIdx[a.c.ID()] = slot
}

// forgetLocked takes id out of the answered requests and returns it.
func (g *governor) forgetLocked(id framing.ID) (answered, bool) {
	slot, ok := g.recentIdx[id]
	if !ok {
		return answered{}, false
	}
	delete(g.recentIdx, id)
	a := g.recent[slot]
	g.recent[slot] = answered{}
	return a, true
}

// Cancelled implements proxy.Governor.
func (g *governor) Cancelled(c *proxy.Call, source, reason string) {
	g.mu.Lock()
	if g.closed { // the session is over: nothing can be followed up
		g.mu.Unlock()
		return
	}
	r := g.calls[c]
	if r == nil { // no rule asked anything of it: it gets its audit line all the same
		r = g.plainRecordLocked(c, g.tools[c])
		delete(g.tools, c)
		g.calls[c] = r
	}
	r.source, r.reason, r.cancelled = source, reason, g.e.clock.Now()
	if r.timer != nil {
		r.timer.Stop()
	}
	// The clocks of the wait for a late answer, and of an escalation, start
	// with the cancel.
	r.lateTimer = g.e.clock.AfterFunc(g.e.opts.Policy.LateWindow, func() { g.windowOver(r) })
	if r.rule.Escalate == "restart" {
		r.restartTimer = g.e.clock.AfterFunc(g.e.opts.Policy.RestartAfter, func() { g.work.post(func() { g.escalate(r) }) })
	}
	free := r.releaseLocked()
	g.e.wg.Add(1) // the record is to be written
	g.mu.Unlock()
	free()
	// Whether the request was withdrawn before it was sent is settled once
	// the transport has handled the cancel: start the hooks after that.
	g.work.post(func() { g.act.After(func() { g.afterCancel(r) }) })
}

// Withdrawn implements proxy.Governor.
func (g *governor) Withdrawn(c *proxy.Call) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r := g.calls[c]; r != nil {
		r.dispatched = false
	}
}

// afterCancel starts what a cancel calls for: the cancel's hook, the wait
// for a late answer, an escalation.
func (g *governor) afterCancel(r *record) {
	g.mu.Lock()
	phase, hook := "on_cancel", r.rule.OnCancel
	if r.source == "deadline" && r.rule.OnTimeout != nil {
		phase, hook = "on_timeout", r.rule.OnTimeout
	}
	if !r.dispatched {
		hook = nil // the server never saw it: nothing to undo
	}
	if hook != nil {
		r.hooksPending++
	}
	r.cancelHandled = true
	g.mu.Unlock()
	if hook != nil {
		g.startHook(r, phase, hook, nil)
	}
	g.settle(r)
}

// Late implements proxy.Governor.
func (g *governor) Late(c *proxy.Call, m *framing.Message) {
	g.mu.Lock()
	r := g.calls[c]
	if r == nil {
		g.mu.Unlock()
		return
	}
	r.late = &Late{At: g.e.clock.Now(), Error: m.IsError, Suppressed: true}
	answer := field(m.Raw, "result")
	phase, hook := "on_late_result", r.rule.OnLateResult
	if m.IsError {
		answer = field(m.Raw, "error")
		phase, hook = "on_late_error", r.rule.OnLateError
	} else if len(r.rule.Capture) > 0 {
		r.capture(answer)
	}
	if g.e.opts.Audit.IncludeResults {
		r.late.Result = answer
	}
	if r.restartTimer != nil {
		r.restartTimer.Stop()
	}
	if hook != nil {
		r.hooksPending++
	}
	task := c.HasTask() && m.TaskID != "" && r.taskID == ""
	if task {
		r.taskID = m.TaskID // created after all: cancel it the way tasks are cancelled
	}
	g.mu.Unlock()
	if task {
		g.cancelTask(r)
	}
	if hook != nil {
		g.startHook(r, phase, hook, answer)
	}
	g.settle(r)
}

// CancelMissed implements proxy.Governor: a cancel for a request already
// answered. For a task-augmented request the task itself is cancelled.
func (g *governor) CancelMissed(id framing.ID) {
	g.mu.Lock()
	a, ok := g.forgetLocked(id)
	r := a.rec
	if ok && r == nil {
		r = g.plainRecordLocked(a.c, a.tool)
		r.answered = g.e.clock.Now()
	}
	if r == nil || !r.cancelled.IsZero() || g.closed {
		g.mu.Unlock()
		return
	}
	r.source, r.reason, r.cancelled, r.cancelHandled = "client", "", g.e.clock.Now(), true
	if r.timer != nil {
		r.timer.Stop()
	}
	task := r.taskID != ""
	g.e.wg.Add(1)
	g.mu.Unlock()
	if task {
		g.cancelTask(r)
		return
	}
	g.settle(r)
}

// plainRecordLocked makes the record of a request no rule asked anything
// of, when it comes to need one.
func (g *governor) plainRecordLocked(c *proxy.Call, tool string) *record {
	return &record{g: g, c: c, rule: g.e.m.Load().match(c.Method(), tool), method: c.Method(), tool: tool,
		id: c.ID().AppendJSON(nil), started: time.Unix(0, c.Started()), dispatched: true}
}

// ServerInitialized implements proxy.Governor.
func (g *governor) ServerInitialized(m *framing.Message) {
	var res struct {
		Capabilities struct {
			Tasks struct {
				Cancel *json.RawMessage `json:"cancel"`
			} `json:"tasks"`
		} `json:"capabilities"`
	}
	if json.Unmarshal(field(m.Raw, "result"), &res) == nil {
		g.mu.Lock()
		g.tasksCancel = res.Capabilities.Tasks.Cancel != nil
		g.mu.Unlock()
	}
}

// Close implements proxy.Governor: timers stop, and cancelled requests
// still waiting for a late answer are written as they stand, once the
// actions already asked for have run.
func (g *governor) Close() {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return
	}
	g.closed = true
	idle := !g.work.busy()
	var frees []func() // slots held or waited for by calls the session ends with
	for _, r := range g.calls {
		idle = idle && r.cancelled.IsZero() && r.timer == nil
		if r.cancelled.IsZero() && (r.held || r.hasSlot) {
			frees = append(frees, r.releaseLocked())
		}
	}
	g.mu.Unlock()
	for _, free := range frees {
		free()
	}
	if idle { // nothing to settle, and no action pending: the common end of a request's own session
		g.work.close()
		g.e.track(g, false)
		return
	}
	done := make(chan struct{})
	g.work.post(func() {
		defer close(done)
		g.mu.Lock()
		var pending []*record
		for _, r := range g.calls {
			if r.timer != nil {
				r.timer.Stop()
			}
			if !r.cancelled.IsZero() {
				r.windowOver = true
				pending = append(pending, r)
			}
		}
		for _, a := range g.recent {
			if a.rec != nil && a.rec.timer != nil {
				a.rec.timer.Stop()
			}
		}
		g.mu.Unlock()
		for _, r := range pending {
			g.settle(r)
		}
	})
	<-done
	g.work.close()
	g.e.track(g, false)
}

// expire acts on a deadline: the request is cancelled as a client cancel
// would cancel it, and the client answered with the proxy's error; a task
// already created is cancelled with tasks/cancel.
func (g *governor) expire(r *record, gen int) {
	g.mu.Lock()
	stale := gen != r.gen || !r.cancelled.IsZero() || g.closed
	task := !r.answered.IsZero() && r.taskID != ""
	if !stale && !r.answered.IsZero() && !task {
		stale = true
	}
	timeout := r.rule.Timeout
	g.mu.Unlock()
	if stale {
		return
	}
	g.e.metrics.DeadlineFired()
	reason := fmt.Sprintf("deadline of %v passed (rule %s)", timeout, r.rule.Name)
	g.log.Info("deadline passed: cancelling", zap.String("method", r.method), zap.String("tool", r.tool),
		zap.ByteString("id", r.id), zap.Duration("timeout", timeout))
	if task {
		g.mu.Lock()
		if g.closed {
			g.mu.Unlock()
			return
		}
		g.forgetLocked(r.c.ID())
		r.source, r.reason, r.cancelled, r.cancelHandled = "deadline", reason, g.e.clock.Now(), true
		g.e.wg.Add(1)
		g.mu.Unlock()
		g.cancelTask(r)
		return
	}
	g.act.Expire(r.c, reason, proxy.DeadlineReply(r.c.ID(), timeout.String()))
}

// cancelTask sends tasks/cancel for r's task, if the server declared it,
// and writes r once answered.
func (g *governor) cancelTask(r *record) {
	g.mu.Lock()
	declared := g.tasksCancel
	if !declared {
		r.taskCancel = "not sent: the server did not declare tasks.cancel"
	} else {
		r.taskPending = true
	}
	g.mu.Unlock()
	if declared {
		params, _ := json.Marshal(map[string]string{"taskId": r.taskID})
		g.work.post(func() {
			g.act.SendOwn(framing.MethodTasksCancel, params, func(m *framing.Message) { g.taskAnswered(r, m) })
		})
	}
	g.settle(r)
}

// taskAnswered records the server's answer to the proxy's tasks/cancel.
func (g *governor) taskAnswered(r *record, m *framing.Message) {
	var res struct {
		Status  string `json:"status"`
		Message string `json:"message"`
	}
	outcome := "cancelled"
	if m.IsError {
		json.Unmarshal(field(m.Raw, "error"), &res)
		outcome = "refused: " + res.Message
	} else if json.Unmarshal(field(m.Raw, "result"), &res) == nil && res.Status != "" {
		outcome = res.Status
	}
	g.mu.Lock()
	r.taskPending, r.taskCancel = false, outcome
	g.mu.Unlock()
	g.settle(r)
}

// windowOver ends the wait for a late answer.
func (g *governor) windowOver(r *record) {
	g.mu.Lock()
	r.windowOver = true
	g.mu.Unlock()
	g.settle(r)
}

// escalate restarts the server when a cancelled request of an
// escalate: restart rule is still unanswered.
func (g *governor) escalate(r *record) {
	g.mu.Lock()
	due := r.dispatched && r.late == nil && !g.closed
	g.mu.Unlock()
	if !due {
		return
	}
	reason := fmt.Sprintf("request %s (%s) did not stop within %v of its cancel", r.id, cmp.Or(r.tool, r.method), g.e.opts.Policy.RestartAfter)
	if g.act.Restart(reason) {
		g.mu.Lock()
		r.restarted = true
		g.mu.Unlock()
	}
}

// capture reads the rule's pointers from doc into r; the latest value wins.
func (r *record) capture(doc json.RawMessage) {
	if len(doc) == 0 {
		return
	}
	var v any
	if json.Unmarshal(doc, &v) != nil {
		return
	}
	for name, ptrs := range r.rule.Capture {
		for _, p := range ptrs {
			if val, ok := p.evalValue(v); ok {
				if r.captured == nil {
					r.captured = map[string]json.RawMessage{}
				}
				r.captured[name] = val
				break
			}
		}
	}
}

// field returns the raw JSON at a path of object keys in doc, or nil.
func field(doc []byte, path ...string) json.RawMessage {
	cur := json.RawMessage(doc)
	for _, k := range path {
		var obj map[string]json.RawMessage
		if json.Unmarshal(cur, &obj) != nil {
			return nil
		}
		if cur = obj[k]; cur == nil {
			return nil
		}
	}
	return cur
}

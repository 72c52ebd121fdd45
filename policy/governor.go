package policy

import (
	"cmp"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
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
	// lg is the session's logger, made at the first line (log): most
	// sessions log nothing, and a logger With a field costs allocations.
	lg   atomic.Pointer[zap.Logger]
	work workQueue

	mu          sync.Mutex // guards the fields below and every record's
	calls       map[*proxy.Call]*record
	plain       proxy.CallList // each tools/call in flight that has no record, noted with its tool
	recent      []answered     // the last requests answered: grows to a ring of recentMax
	recentNext  int
	recentIdx   framing.IDMap[int] // id -> its place in recent
	tasksCancel bool               // the server declared capabilities.tasks.cancel
	closed      bool
	// client is who the session's client says it is (its initialize's
	// clientInfo); cancels, that it has sent a cancel: client_timeout:
	// auto no longer applies (clienttimeout.go).
	client  clientInfo
	cancels bool
	// tasks are the tasks hosted for the session (hosted.go); the server
	// itself declared tasks for tools/call (serverTasks) and tasks/list
	// (serverTaskList), and runs serverTools as tasks: never hosted twice.
	tasks          map[string]*hosted
	polls          map[*proxy.Call]*hosted // the tasks/result calls waiting, each on its task
	serverTasks    bool
	serverTaskList bool
	serverTools    map[string]bool
	// sending counts the hosted calls being sent (sendHosted), whose own
	// call is not known until SendOwn returns; early keeps what came on
	// an unknown own call's stream meanwhile (a server that answered at
	// once), for the call it turns out to be.
	sending int
	early   map[*proxy.Call][][]byte
	// sent is signalled, with mu, as a hosted call's send ends (sending
	// goes down): CancelOwnWork waits for it.
	sent sync.Cond
	// linger, once set (Linger), ends the session when its last hosted
	// task is forgotten: a request's own session that outlasts it.
	linger func()
	// own is the table of the session's calls that re-issues may join
	// (reissue.go), made when first needed, where the session is one
	// client's. joins is the table the governor's calls and waiters are
	// in, own or the Engine's, once there is one, so that the session's
	// other events skip it unlocked.
	own   *joins
	joins atomic.Pointer[joins]
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
	// The client's timeout (clienttimeout.go): its budget, whether auto
	// set it, and its timer, of generation cgen.
	budget    time.Duration
	auto      bool
	ctimer    Timer
	cgen      int
	cdeadline time.Time
	captured  map[string]json.RawMessage
	// correlation: the client's own ids read by the rule's correlate
	correlation map[string]json.RawMessage

	st       story  // where its story is: changed only by step (story.go)
	lease    func() // frees the fleet-wide slot it holds, if its rule's count is the fleet's
	answered time.Time
	taskID   string
	// awaiting: a hosted task's call that waits for its client's input
	// (2026-07-28, input_required): nothing of it runs upstream, and a
	// cancel now stops all of it.
	awaiting bool

	source       proxy.Source
	reason       string
	cancelled    time.Time
	late         *Late
	lateTimer    Timer
	restartTimer Timer
	restarted    bool
	hooks        []HookResult
}

func newGovernor(e *Engine, session string, a proxy.Actions) *governor {
	g := &governor{e: e, session: session, act: a}
	g.sent.L = &g.mu
	// The maps and the ring are made when first needed: many sessions (a
	// sessionless request is one) see one request, which no rule may
	// govern.
	e.track(g, true)
	return g
}

// log returns the governor's logger, naming its session.
func (g *governor) log() *zap.Logger {
	if l := g.lg.Load(); l != nil {
		return l
	}
	g.lg.CompareAndSwap(nil, g.e.log.With(zap.String("session", g.session)))
	return g.lg.Load()
}

// Observe implements proxy.Governor.
func (g *governor) Observe(ev proxy.Change) {
	if j := g.joins.Load(); j != nil {
		g.observeShared(j, ev)
	}
	switch ev.Kind {
	case proxy.ChangeProgress:
		g.progress(ev.Call, ev.Msg)
	case proxy.ChangeAnswered:
		g.answered(ev.Call, ev.Msg)
	case proxy.ChangeCancelled:
		g.cancelled(ev.Call, ev.Source, ev.Reason)
	case proxy.ChangeWithdrawn:
		g.withdrawn(ev.Call)
	case proxy.ChangeLate:
		g.late(ev.Call, ev.Msg)
	case proxy.ChangeCancelMissed:
		g.cancelMissed(ev.ID)
	case proxy.ChangeServerReady:
		g.serverReady(ev.Msg)
	}
}

// Admit implements proxy.Governor.
func (g *governor) Admit(c *proxy.Call, m *framing.Message) proxy.Admission {
	if g.e.m.Load().hosting {
		if a, ok := g.admitHosting(c, m); ok {
			return a
		}
	}
	return g.admit(c, m)
}

// admit admits a request that hosting tasks leaves alone.
func (g *governor) admit(c *proxy.Call, m *framing.Message) proxy.Admission {
	if m.Method == framing.MethodInitialize {
		g.initialize(m)
		return proxy.Admission{}
	}
	tool, rule, joinKey, table := "", (*Effective)(nil), "", (*joins)(nil)
	var budget time.Duration
	var auto bool
	if m.Method == "tools/call" {
		g.mu.Lock()
		tool = c.Tool() // read and interned by the ledger
		rule = g.e.m.Load().match(m.Method, tool)
		budget, auto = g.budgetLocked(rule, m)
		if rule.Reissue && !m.HasTask && !g.closed && g.act.DefersCancels() {
			if j, key, ok := g.reissueKeyLocked(c, rule, tool, m); ok {
				if g.joinLocked(j, c, tool, key, budget) {
					g.mu.Unlock()
					return proxy.Admission{Hold: true} // never sent: answered with the call it joined
				}
				joinKey, table = key, j
			}
		}
		if !rule.active() && budget == 0 && !m.HasTask && !g.closed {
			// Nothing to do unless it is cancelled (see Cancelled): no
			// record, no allocation; the tool is noted for the audit line.
			g.plain.Add(c, tool)
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
		started: g.e.clock.Now(), st: story{sent: true}, budget: budget, auto: auto}
	if rule.hasHooks() || g.e.opts.Audit.IncludeArguments {
		r.args = field(m.Raw, "params", "arguments")
	}
	if len(rule.Correlate) > 0 {
		r.correlation = correlate(rule.Correlate, field(m.Raw, "params"))
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return proxy.Admission{}
	}
	g.keepLocked(c, r)
	a := proxy.Admission{Timed: rule.Timeout > 0 || budget > 0,
		WantsLate: rule.OnLateResult != nil || rule.OnLateError != nil || m.HasTask}
	// A deadline that progress pushes back sees progress the client did
	// not ask for: the tracker asks for it, under a token of its own.
	a.WatchProgress = rule.Timeout > 0 && rule.ResetOnProgress
	if joinKey != "" {
		// Its re-issues join it; its client's cancel waits for them, and
		// its answer is read after a cancel, for them.
		g.shareLocked(table, r, joinKey)
		a.DeferCancel, a.WantsLate = true, true
	}
	if rule.Timeout > 0 {
		g.armLocked(r, r.started.Add(rule.Timeout))
	}
	if budget > 0 {
		g.armClientLocked(r, r.started.Add(budget))
	}
	if rule.slot != nil {
		if !rule.slot.acquire(r) {
			r.st.slot, r.st.sent = waitingSlot, false
			g.e.metrics.Waiting(1)
			a.Hold = true
			return a
		}
		r.st.slot = holdingSlot
	}
	return a
}

// armLocked (re)sets r's deadline.
func (g *governor) armLocked(r *record, at time.Time) {
	r.deadline = at
	g.rearmLocked(&r.timer, &r.gen, at, func(gen int) { g.expire(r, gen) })
}

// rearmLocked stops the timer *t, if any, moves its generation *gen on
// (a timer of an older one is stale), and sets *t to run f with the new
// generation at at, on the work goroutine.
func (g *governor) rearmLocked(t *Timer, gen *int, at time.Time, f func(gen int)) {
	if *t != nil {
		(*t).Stop()
	}
	*gen++
	n := *gen
	*t = clock.At(g.e.clock, at, func() { g.work.post(func() { f(n) }) })
}

// progress is told of progress from the server for a call in flight.
func (g *governor) progress(c *proxy.Call, m *framing.Message) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.calls[c]
	if r == nil || r.st.phase != phaseInFlight {
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

// answered is told of the server's response to a call in flight.
func (g *governor) answered(c *proxy.Call, m *framing.Message) {
	g.mu.Lock()
	r := g.calls[c]
	if r == nil {
		tool, _ := g.plain.Remove(c)
		g.rememberLocked(answered{c: c, tool: tool})
		g.mu.Unlock()
		return
	}
	delete(g.calls, c)
	ev := event{kind: evAnswered, at: g.e.clock.Now()}
	if m != nil {
		if len(r.rule.Capture) > 0 {
			r.capture(field(m.Raw, "result"))
		}
		if c.HasTask() {
			ev.task = m.TaskID
		}
	}
	out := g.stepLocked(r, ev)
	if r.timer != nil && r.taskID == "" {
		r.timer.Stop()
	}
	if r.ctimer != nil { // answered, with a task or not: its client has it
		r.ctimer.Stop()
	}
	g.rememberLocked(answered{c: c, tool: r.tool, rec: r})
	g.mu.Unlock()
	g.run(r, out)
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
	if r.timer != nil && r.st.slot == waitingSlot && !g.e.clock.Now().Before(r.deadline) {
		// Its deadline passed as the slot came (a clock that fires both at
		// once): its expire, posted or about to be, withdraws it, so it is
		// not sent; the slot goes on, as from a grant that finds its
		// request cancelled.
		g.mu.Unlock()
		r.freeWith(lease)()
		return
	}
	out := g.stepLocked(r, event{kind: evGranted, lease: lease})
	g.mu.Unlock()
	g.run(r, out)
}

// rememberLocked keeps an answered request for a cancel that may follow,
// in place of the oldest one.
func (g *governor) rememberLocked(a answered) {
	if len(g.recent) < recentMax { // the ring grows as it fills: most sessions see a few requests
		g.recent = append(g.recent, a)
		g.recentIdx.Set(a.c.ID(), len(g.recent)-1)
		return
	}
	slot := g.recentNext
	g.recentNext = (g.recentNext + 1) % recentMax
	if old := g.recent[slot].c; old != nil && g.recentIdx.At(old.ID()) == slot {
		g.recentIdx.Delete(old.ID())
	}
	g.recent[slot] = a
	g.recentIdx.Set(a.c.ID(), slot)
}

// forgetLocked takes id out of the answered requests and returns it.
func (g *governor) forgetLocked(id framing.ID) (answered, bool) {
	slot, ok := g.recentIdx.Get(id)
	if !ok {
		return answered{}, false
	}
	g.recentIdx.Delete(id)
	a := g.recent[slot]
	g.recent[slot] = answered{}
	return a, true
}

// cancelled is told that a call was cancelled.
func (g *governor) cancelled(c *proxy.Call, source proxy.Source, reason string) {
	g.mu.Lock()
	if source == proxy.SourceClient {
		g.cancelsLocked()
	}
	g.unpollLocked(c)
	if g.closed { // the session is over: nothing can be followed up
		g.mu.Unlock()
		c.Span().End("cancelled as its session ended", false)
		return
	}
	r := g.calls[c]
	if r == nil { // no rule asked anything of it: it gets its audit line all the same
		tool, _ := g.plain.Remove(c)
		r = g.plainRecordLocked(c, tool)
		g.keepLocked(c, r)
	}
	if r.st.phase != phaseInFlight {
		g.mu.Unlock()
		return
	}
	out := g.cancelLocked(r, source, reason)
	g.mu.Unlock()
	g.run(r, out)
	// Whether the request was withdrawn before it was sent is settled once
	// the transport has handled the cancel: start the hooks after that.
	g.work.post(func() { g.act.After(func() { g.afterCancel(r) }) })
}

// cancelLocked applies a cancel of r, in flight, to its story: its
// timers stop, and the wait for a late answer (and an escalation) starts.
func (g *governor) cancelLocked(r *record, source proxy.Source, reason string) []effect {
	out := g.stepLocked(r, event{kind: evCancelled, at: g.e.clock.Now(), source: source, reason: reason})
	for _, t := range []Timer{r.timer, r.ctimer} {
		if t != nil {
			t.Stop()
		}
	}
	// The clocks of the wait for a late answer, and of an escalation, start
	// with the cancel.
	r.lateTimer = g.e.clock.AfterFunc(g.e.opts.Policy.LateWindow, func() { g.event(r, event{kind: evWindowOver}) })
	if r.rule.Escalate == "restart" {
		r.restartTimer = g.e.clock.AfterFunc(g.e.opts.Policy.RestartAfter, func() { g.work.post(func() { g.escalate(r) }) })
	}
	return out
}

// withdrawn is told that a cancelled call was never sent.
func (g *governor) withdrawn(c *proxy.Call) {
	g.mu.Lock()
	r := g.calls[c]
	if r == nil {
		r = g.hostingLocked(c)
	}
	var out []effect
	if r != nil {
		out = g.stepLocked(r, event{kind: evWithdrawn})
	}
	g.mu.Unlock()
	g.run(r, out)
}

// afterCancel starts what a cancel calls for: the cancel's hook, the wait
// for a late answer, an escalation.
func (g *governor) afterCancel(r *record) {
	g.event(r, r.handled()) // the hook starts only if the server saw the request
}

// handled is the event of r's cancel carried out, with the hook its
// source calls for: on_timeout for a deadline, a client timeout and a
// hosted task's ttl, if set; else on_cancel.
func (r *record) handled() event {
	ev := event{kind: evHandled, phase: "on_cancel", hook: r.rule.OnCancel}
	timeout := r.source == proxy.SourceDeadline || r.source == proxy.SourceClientTimeout || r.source == proxy.SourceTaskTTL
	if timeout && r.rule.OnTimeout != nil {
		ev.phase, ev.hook = "on_timeout", r.rule.OnTimeout
	}
	return ev
}

// late is told of an answer that came after its call's cancel.
func (g *governor) late(c *proxy.Call, m *framing.Message) {
	g.mu.Lock()
	r := g.calls[c]
	if r == nil {
		g.mu.Unlock()
		return
	}
	out := g.lateLocked(r, m)
	g.mu.Unlock()
	g.run(r, out)
}

// lateLocked applies the answer m, come after r's cancel, to r's story.
func (g *governor) lateLocked(r *record, m *framing.Message) []effect {
	stopped := m.IsError || string(field(m.Raw, "result", "isError")) == "true"
	ev := event{kind: evLate, late: &Late{At: g.e.clock.Now(), Error: m.IsError, Stopped: stopped, Suppressed: true},
		answer: field(m.Raw, "result"), phase: "on_late_result", hook: r.rule.OnLateResult}
	if m.IsError {
		ev.answer, ev.phase, ev.hook = field(m.Raw, "error"), "on_late_error", r.rule.OnLateError
	} else if len(r.rule.Capture) > 0 {
		r.capture(ev.answer)
	}
	if g.e.opts.Audit.IncludeResults {
		ev.late.Result = ev.answer
	}
	if r.c.HasTask() {
		ev.task = m.TaskID
	}
	if r.restartTimer != nil {
		r.restartTimer.Stop()
	}
	return g.stepLocked(r, ev)
}

// cancelMissed is told of a cancel for a request already answered. For a
// task-augmented request the task itself is cancelled.
func (g *governor) cancelMissed(id framing.ID) {
	g.mu.Lock()
	g.cancelsLocked()
	a, ok := g.forgetLocked(id)
	r := a.rec
	if ok && r == nil {
		r = g.plainRecordLocked(a.c, a.tool)
		r.answered, r.st.phase = g.e.clock.Now(), phaseReplied
	}
	if r == nil || r.st.phase >= phaseCancelled || g.closed {
		g.mu.Unlock()
		return
	}
	if r.timer != nil {
		r.timer.Stop()
	}
	out := g.stepLocked(r, event{kind: evCancelled, at: g.e.clock.Now(), source: proxy.SourceClient, taskNext: r.taskID != ""})
	g.mu.Unlock()
	g.run(r, out)
}

// keepLocked keeps r, c's record, making the map at its first.
func (g *governor) keepLocked(c *proxy.Call, r *record) {
	if g.calls == nil {
		g.calls = make(map[*proxy.Call]*record)
	}
	g.calls[c] = r
}

// plainRecordLocked makes the record of a request no rule asked anything
// of, when it comes to need one.
func (g *governor) plainRecordLocked(c *proxy.Call, tool string) *record {
	return &record{g: g, c: c, rule: g.e.m.Load().match(c.Method(), tool), method: c.Method(), tool: tool,
		id: c.ID().AppendJSON(nil), started: time.Unix(0, c.Started()), st: story{sent: true}}
}

// serverReady is told of the server's answer to initialize.
func (g *governor) serverReady(m *framing.Message) {
	var res struct {
		Capabilities struct {
			Tasks struct {
				Cancel   *json.RawMessage `json:"cancel"`
				List     *json.RawMessage `json:"list"`
				Requests struct {
					Tools struct {
						Call *json.RawMessage `json:"call"`
					} `json:"tools"`
				} `json:"requests"`
			} `json:"tasks"`
		} `json:"capabilities"`
	}
	if json.Unmarshal(field(m.Raw, "result"), &res) == nil {
		t := res.Capabilities.Tasks
		g.mu.Lock()
		g.tasksCancel = t.Cancel != nil
		g.serverTasks, g.serverTaskList = t.Requests.Tools.Call != nil, t.List != nil
		g.mu.Unlock()
	}
}

// Close implements proxy.Governor: timers stop, and cancelled requests
// still waiting for a late answer are written as they stand, once the
// actions already asked for have run.
func (g *governor) Close() {
	if settle, _ := g.beginClose(); settle != nil {
		settle()
	}
}

// CloseSoon is Close without the wait: the governance ends at once, and
// what is left to settle is settled in the background. The common end of
// a request's own session (nothing to settle) costs no goroutine. It
// reports whether the governance ended here with nothing left to settle
// and no action pending: then the governor acts on its session no more.
func (g *governor) CloseSoon() (done bool) {
	settle, first := g.beginClose()
	if settle != nil {
		go settle()
	}
	return first && settle == nil
}

// beginClose ends the governance, and returns what settles the requests
// left, which waits for them; nil when nothing is left. first says
// whether this call ended it (else it had ended before).
func (g *governor) beginClose() (settle func(), first bool) {
	g.closeHosted()
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil, false
	}
	g.closed = true
	if j := g.joins.Load(); j != nil {
		for _, f := range j.leaveAll(g) { // no re-issue can come now
			f()
		}
	}
	idle := !g.work.busy()
	var frees []effect // of slots held or waited for by calls the session ends with
	for _, r := range g.calls {
		idle = idle && r.st.phase == phaseInFlight && r.timer == nil && r.ctimer == nil
		if r.st.phase == phaseInFlight && r.st.slot != noSlot {
			frees = append(frees, g.stepLocked(r, event{kind: evClosed})...)
		}
	}
	g.mu.Unlock()
	g.run(nil, frees)
	if idle { // nothing to settle, and no action pending: the common end of a request's own session
		g.work.close()
		g.e.track(g, false)
		return nil, true
	}
	return g.settle, true
}

// settle writes the requests a closed governor leaves as they stand, once
// the actions already asked for have run.
func (g *governor) settle() {
	done := make(chan struct{})
	g.work.post(func() {
		defer close(done)
		g.mu.Lock()
		type todo struct {
			r   *record
			out []effect
		}
		var pending []todo
		for _, r := range g.calls {
			if r.timer != nil {
				r.timer.Stop()
			}
			if r.ctimer != nil {
				r.ctimer.Stop()
			}
			if r.st.phase == phaseCancelled {
				pending = append(pending, todo{r, g.stepLocked(r, event{kind: evClosed})})
			}
		}
		for _, a := range g.recent {
			if a.rec != nil && a.rec.timer != nil {
				a.rec.timer.Stop()
			}
		}
		g.mu.Unlock()
		for _, p := range pending {
			g.run(p.r, p.out)
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
	stale := gen != r.gen || r.st.phase >= phaseCancelled || g.closed
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
	g.log().Info("deadline passed: cancelling", events.Mark(events.DeadlinePassed), zap.String("method", r.method), zap.String("tool", r.tool),
		zap.ByteString("id", r.id), r.correlationField(), zap.Duration("timeout", timeout))
	if task {
		g.mu.Lock()
		if g.closed {
			g.mu.Unlock()
			return
		}
		g.forgetLocked(r.c.ID())
		out := g.stepLocked(r, event{kind: evCancelled, at: g.e.clock.Now(), source: proxy.SourceDeadline, reason: reason, taskNext: true})
		g.mu.Unlock()
		g.run(r, out)
		return
	}
	g.act.Expire(r.c, proxy.SourceDeadline, reason, proxy.DeadlineReply(r.c.ID(), timeout.String()))
}

// cancelTask sends tasks/cancel for r's task, if the server declared it,
// and writes r once answered.
func (g *governor) cancelTask(r *record) {
	g.mu.Lock()
	declared := g.tasksCancel
	out := g.stepLocked(r, event{kind: evTaskSent, declared: declared})
	g.mu.Unlock()
	if declared {
		// An event on the request's span, if it is still open, and a span of
		// its own under it either way (the request's may have ended with
		// the answer that created the task).
		task := proxy.String("mcp_cancel_proxy.task.id", r.taskID)
		r.c.Span().Event(proxy.EventTasksCancel, task)
		span := r.c.Span().Child(framing.MethodTasksCancel, task)
		params, _ := json.Marshal(map[string]string{"taskId": r.taskID})
		g.work.post(func() {
			g.act.SendOwn(framing.MethodTasksCancel, params, framing.ID{}, func(m *framing.Message) { g.taskAnswered(r, m, span) })
		})
	}
	g.run(r, out)
}

// taskAnswered records the server's answer to the proxy's tasks/cancel,
// which ends its span.
func (g *governor) taskAnswered(r *record, m *framing.Message, span proxy.Span) {
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
	span.End(outcome, outcome != "cancelled")
	g.event(r, event{kind: evTaskAnswered, outcome: outcome})
}

// escalate restarts the server when a cancelled request of an
// escalate: restart rule is still unanswered.
func (g *governor) escalate(r *record) {
	g.mu.Lock()
	due := r.st.sent && r.late == nil && r.st.phase == phaseCancelled && !g.closed
	g.mu.Unlock()
	if !due {
		return
	}
	reason := fmt.Sprintf("request %s (%s) did not stop within %v of its cancel", r.id, cmp.Or(r.tool, r.method), g.e.opts.Policy.RestartAfter)
	span := r.c.Span().Child("restart", proxy.String(proxy.AttrReason, reason))
	if g.act.Restart(reason) {
		span.End("server restarted", false)
		g.event(r, event{kind: evRestarted})
		return
	}
	span.End("the transport cannot restart its server", true)
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

// correlate reads the values ptrs name from a request's params (the
// first pointer that points at something wins): strings and numbers of
// at most correlateMax bytes, nothing else.
func correlate(ptrs map[string][]pointer, params json.RawMessage) map[string]json.RawMessage {
	var v any
	if len(params) == 0 || json.Unmarshal(params, &v) != nil {
		return nil
	}
	var out map[string]json.RawMessage
	for name, ps := range ptrs {
		for _, p := range ps {
			val, ok := p.evalValue(v)
			if !ok || len(val) > correlateMax || !(val[0] == '"' || val[0] == '-' || (val[0] >= '0' && val[0] <= '9')) {
				continue
			}
			if out == nil {
				out = map[string]json.RawMessage{}
			}
			out[name] = val
			break
		}
	}
	return out
}

// correlateMax bounds a correlated value.
const correlateMax = 256

// correlationField is r's correlated ids, for a log line.
func (r *record) correlationField() zap.Field {
	if len(r.correlation) == 0 {
		return zap.Skip()
	}
	return zap.Any("correlation", r.correlation)
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

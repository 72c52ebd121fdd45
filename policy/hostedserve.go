package policy

import (
	"encoding/json"
	"slices"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// The tasks/* requests of a hosted task, served from the proxy's record
// (hosted.go), and the server's messages about its call.

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
	g.mu.Lock()
	defer g.mu.Unlock()
	var h *hosted
	for _, t := range g.tasks {
		if t.own == own {
			h = t
		}
	}
	if h == nil && g.sending > 0 { // perhaps a hosted call's, not yet known
		if g.early == nil {
			g.early = map[*proxy.Call][][]byte{}
		}
		g.early[own] = append(g.early[own], frame)
		return
	}
	g.fromOwnLocked(h, &f.Msgs[0], frame)
}

// fromOwnLocked is FromOwn of a message m (its frame) on the stream of h's
// call (h nil: none the governor hosts). g.mu is held.
func (g *governor) fromOwnLocked(h *hosted, m *framing.Message, frame []byte) {
	switch {
	case h == nil || h.terminal():
	case m.Kind == framing.KindRequest && h.v2:
		g.log().Warn("a server's request during a 2026-07-28 task the proxy hosts has no way to its client: dropped",
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

// Waits implements proxy.Waiter: c is a tasks/result waiting for its
// task to end, which the proxy answers itself.
func (g *governor) Waits(c *proxy.Call) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.polls[c] != nil
}

// unpollLocked forgets c if it is a tasks/result waiting (cancelled by
// its client, or left by it): its task's result is no longer kept for it.
func (g *governor) unpollLocked(c *proxy.Call) {
	h := g.polls[c]
	if h == nil {
		return
	}
	delete(g.polls, c)
	if i := slices.Index(h.waiting, c); i >= 0 {
		h.waiting = slices.Delete(h.waiting, i, i+1)
	}
}

// takeWaitingLocked returns the tasks/result calls waiting on h, which
// then waits for none.
func (g *governor) takeWaitingLocked(h *hosted) []*proxy.Call {
	waiting := h.waiting
	h.waiting = nil
	for _, c := range waiting {
		delete(g.polls, c)
	}
	return waiting
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
	meta := m.MetaSpan
	v2 := meta.Found() && len(field(m.Raw[meta.Start:meta.End], metaProtocolRev)) > 0 // 2026-07-28: the tasks extension's rules
	if v2 {                                                                           // a task hosted by another request without a session?
		if hg := g.hostOf(c, p.TaskID); hg != nil {
			return hg.serveFor(g, c, m, p.TaskID)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.closed || !v2 && m.Method == "tasks/update":
		return proxy.Admission{}, false
	case v2:
		return g.serveTasks2Locked(g, c, m, p.TaskID)
	case m.Method == "tasks/list":
		return g.listTasksLocked(c)
	}
	return g.serveTasks1Locked(c, m, p.TaskID)
}

// listTasksLocked serves a 2025-11-25 tasks/list: the session's hosted
// tasks, where the server keeps no list of its own.
func (g *governor) listTasksLocked(c *proxy.Call) (proxy.Admission, bool) {
	if g.serverTaskList {
		return proxy.Admission{}, false // the server's own list; the hosted tasks are not in it (docs/tasks.md)
	}
	views := []taskView{}
	for _, h := range g.tasks {
		if !h.expired {
			views = append(views, h.view())
		}
	}
	sortViews(views)
	b, _ := json.Marshal(struct {
		Tasks []taskView `json:"tasks"`
	}{views})
	g.serveSoon(c, answerWith(c.ID(), b))
	return proxy.Admission{Hold: true}, true
}

// serveSoon answers c, a request the governor holds, with reply, from its
// work queue.
func (g *governor) serveSoon(c *proxy.Call, reply []byte) {
	g.work.post(func() { g.act.Serve(c, reply) })
}

// serveTasks1Locked serves a 2025-11-25 tasks/get, tasks/result or
// tasks/cancel of task id, if the proxy hosts it.
func (g *governor) serveTasks1Locked(c *proxy.Call, m *framing.Message, id string) (proxy.Admission, bool) {
	h := g.listedLocked(id)
	if h == nil {
		if g.serverTasks {
			return proxy.Admission{}, false // the server's task, or none: the server says
		}
		g.serveSoon(c, unknownTask(c.ID(), "no task "+cut(id, 100)+": unknown, expired or dropped"))
		return proxy.Admission{Hold: true}, true
	}
	switch m.Method {
	case "tasks/get":
		// The task as it is when the answer goes, after what the queue
		// holds before it: a call being sent, with what its server asked
		// meanwhile (before, a tasks/get then said working where the task
		// was input_required: TestHostedTaskAsksBeforeItsCallIsKnown failed
		// under -cpu 4).
		g.work.post(func() {
			g.mu.Lock()
			b, _ := json.Marshal(h.view())
			g.mu.Unlock()
			g.act.Serve(c, answerWith(c.ID(), b))
		})
	case "tasks/result":
		if !h.terminal() {
			h.waiting = append(h.waiting, c)
			if g.polls == nil {
				g.polls = map[*proxy.Call]*hosted{}
			}
			g.polls[c] = h
			g.passAsksLocked(h)
			break
		}
		g.work.post(func() { g.act.Serve(c, g.taskResult(h, c.ID())) })
	case "tasks/cancel":
		if h.terminal() {
			g.serveSoon(c, unknownTask(c.ID(), "task "+h.id+" is already "+h.status))
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
	h := g.listedLocked(id)
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
	via.serveSoon(c, reply)
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
		g.work.post(func() { g.sendHosted(h, params) })
	}
	return answerWith(c.ID(), []byte(`{"resultType":"complete"}`))
}

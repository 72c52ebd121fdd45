package policy

import (
	"encoding/json"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// startHook runs a hook for r in the background; answer is the late
// result or error, for the late hooks.
func (g *governor) startHook(r *record, phase string, h *Hook, answer []byte) {
	g.mu.Lock()
	kind := map[string]string{"on_cancel": "cancel", "on_timeout": "timeout", "on_late_result": "late_result", "on_late_error": "late_error"}[phase]
	ev := &HookEvent{Event: kind, Time: g.e.clock.Now(), Started: r.started, Session: g.session, Direction: "client_to_server",
		IdempotencyKey: idempotencyKey(g.session, r.id, r.started, kind),
		RequestID:      r.id, Correlation: r.correlation, Method: r.method, Tool: r.tool, Arguments: r.args, Source: string(r.source), Reason: r.reason,
		Dispatched: r.st.sent, span: r.span()}
	if len(r.captured) > 0 {
		ev.Captured = make(map[string]json.RawMessage, len(r.captured))
		for k, v := range r.captured {
			ev.Captured[k] = v
		}
	}
	if phase == "on_late_error" {
		ev.Error = answer
	} else {
		ev.Result = answer
	}
	g.mu.Unlock()
	g.e.run.run(phase, h, ev, func(res HookResult) {
		switch {
		case res.Queued:
			g.log().Info("hook queued to the fleet", zap.String("phase", phase), zap.String("hook", res.Target),
				zap.ByteString("id", r.id), r.correlationField(), zap.String("tool", r.tool))
		case res.Pending:
			g.log().Warn("hook stopped at shutdown: kept in the hook store for the next start", zap.String("phase", phase),
				zap.String("hook", res.Target), zap.Int("attempts", res.Attempts), zap.ByteString("id", r.id), r.correlationField(), zap.String("tool", r.tool))
		case !res.OK:
			g.e.metrics.HookRan(phase, false)
			g.log().Error("hook failed: the work it was to undo or stop is orphaned", events.Mark(events.HookFailed), zap.String("phase", phase),
				zap.String("hook", res.Target), zap.Int("attempts", res.Attempts), zap.String("error", res.Error),
				zap.Int("output_bytes", len(res.Output)), zap.ByteString("id", r.id), r.correlationField(), zap.String("tool", r.tool))
			if g.e.opts.LogPayloads {
				g.log().Debug("failed hook's output", zap.String("phase", phase), zap.String("output", res.Output))
			}
		default:
			g.e.metrics.HookRan(phase, true)
			g.log().Info("hook ran", events.Mark(events.HookRan), zap.String("phase", phase), zap.String("hook", res.Target),
				zap.Int("attempts", res.Attempts), zap.ByteString("id", r.id), r.correlationField(), zap.String("tool", r.tool))
		}
		g.event(r, event{kind: evHookDone, result: res})
	})
}

// event applies ev to r's story and runs what it calls for.
func (g *governor) event(r *record, ev event) {
	g.mu.Lock()
	out := g.stepLocked(r, ev)
	g.mu.Unlock()
	g.run(r, out)
}

// stepLocked applies ev to r's story (see story.go): an event the story
// cannot take is logged and changes nothing. A story that is cancelled is
// counted until its audit line is written; one that is over leaves the
// session's calls, its timers stop, and its audit line is built here,
// under the lock. The caller runs the effects once it has unlocked.
func (g *governor) stepLocked(r *record, ev event) []effect {
	was := r.st.phase
	out, err := r.step(ev)
	if err != nil {
		g.log().Error("policy: a request's story cannot take this event", zap.Error(err), zap.ByteString("id", r.id))
	}
	if was < phaseCancelled && r.st.phase >= phaseCancelled {
		g.e.wg.Add(1) // its audit line is to be written
	}
	for i := range out {
		if out[i].kind != doWrite {
			continue
		}
		if g.calls[r.c] == r {
			delete(g.calls, r.c)
		}
		for _, t := range []Timer{r.lateTimer, r.restartTimer} {
			if t != nil {
				t.Stop()
			}
		}
		out[i].rec = g.recordLocked(r)
	}
	return out
}

// run does what a story asked for, unlocked.
func (g *governor) run(r *record, out []effect) {
	for _, e := range out {
		switch e.kind {
		case doDispatch:
			g.work.post(func() { g.act.Dispatch(r.c) })
		case doFree:
			e.free()
		case doStartHook:
			g.startHook(r, e.phase, e.hook, e.answer)
		case doCancelTask:
			g.cancelTask(r)
		case doWrite:
			g.write(r, e.rec)
		}
	}
}

// write writes a story's audit line, and counts how it ended.
func (g *governor) write(r *record, rec *Record) {
	defer g.e.wg.Done()
	if rec.Status == StatusOrphan {
		g.e.metrics.Orphan()
	}
	settled := rec.Dispatched && r.answered.IsZero() && rec.TaskID == ""
	if settled {
		g.e.metrics.CancelSettled(rec.Honour())
	}
	g.e.stories.note(rec, settled)
	g.e.writeAudit(rec, g.log)
	if span := r.span(); span != nil {
		span.Set(rec.spanAttrs()...)
		span.End(rec.Status, !statusSettled(rec.Status))
	}
}

// traceID is the trace id of a W3C traceparent (version 00), or "".
func traceID(tc proxy.TraceContext) string {
	if p := tc.Parent; len(p) == 55 && p[2] == '-' && p[35] == '-' {
		return p[3:35]
	}
	return ""
}

// span is r's request's span, or nil when it is not traced.
func (r *record) span() proxy.Span {
	if !r.c.Traced() {
		return nil
	}
	return r.c.Span()
}

// recordLocked builds r's audit line.
func (g *governor) recordLocked(r *record) *Record {
	rec := &Record{Time: g.e.clock.Now(), Session: g.session, Direction: "client_to_server", ID: r.id, Correlation: r.correlation,
		Method: r.method, Tool: r.tool, Rule: r.rule.Name, Source: string(r.source), Reason: r.reason,
		Started: r.started, Dispatched: r.st.sent, Notified: r.st.sent && r.answered.IsZero(),
		Late: r.late, TaskID: r.taskID, TaskCancel: r.st.taskCancelText(), Captured: r.captured, Hooks: r.hooks,
		Restarted: r.restarted}
	if r.taskID != "" && r.st.task >= taskSent {
		rec.Notified = true // tasks/cancel was sent
	}
	if r.awaiting {
		rec.Notified = false // nothing of it ran upstream to notify
	}
	cancelled := r.cancelled
	rec.Cancelled = &cancelled
	if g.e.opts.Audit.IncludeArguments {
		rec.Arguments = r.args
	}
	if !g.e.opts.Audit.IncludeHookOutput {
		rec.Hooks = make([]HookResult, len(r.hooks))
		for i, h := range r.hooks {
			h.Output = ""
			rec.Hooks[i] = h
		}
	}
	rec.Status = r.status()
	rec.TraceID = traceID(r.c.Span().Context())
	return rec
}

// status says in plain words what happened to r.
func (r *record) status() string {
	failed, lateHook, pending, queued := false, false, false, false
	for _, h := range r.hooks {
		pending = pending || h.Pending
		queued = queued || h.Queued
		failed = failed || (!h.OK && !h.Pending && !h.Queued)
		lateHook = lateHook || h.Phase == "on_late_result" || h.Phase == "on_late_error"
	}
	switch {
	case !r.st.sent:
		return StatusNotDispatched
	case failed:
		return StatusOrphan
	case pending:
		return StatusCompensationPending
	case queued:
		return StatusQueued
	case r.awaiting: // a hosted task waiting for its client's input: nothing runs on
		return StatusTaskCancelled
	case r.taskID != "" && r.st.task == taskAnswered && r.st.outcome == "cancelled":
		return StatusTaskCancelled
	case r.taskID != "" && r.st.task >= taskNotDeclared:
		return StatusTaskNotCancel
	case !r.answered.IsZero():
		return StatusCompletedBefore
	case r.late != nil && lateHook:
		return StatusCompensated
	case r.late != nil:
		return StatusAnsweredLate
	case len(r.hooks) > 0:
		return StatusHookRan
	}
	return StatusNotConfirmed
}

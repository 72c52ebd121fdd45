package policy

import (
	"encoding/json"

	"go.uber.org/zap"
)

// startHook runs a hook for r in the background; answer is the late
// result or error, for the late hooks.
func (g *governor) startHook(r *record, phase string, h *Hook, answer []byte) {
	g.mu.Lock()
	kind := map[string]string{"on_cancel": "cancel", "on_timeout": "timeout", "on_late_result": "late_result", "on_late_error": "late_error"}[phase]
	ev := &HookEvent{Event: kind, Time: g.e.clock.Now(), Session: g.session, Direction: "client_to_server",
		IdempotencyKey: idempotencyKey(g.session, r.id, r.started, kind),
		RequestID:      r.id, Method: r.method, Tool: r.tool, Arguments: r.args, Source: r.source, Reason: r.reason,
		Dispatched: r.dispatched}
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
			g.log.Info("hook queued to the fleet", zap.String("phase", phase), zap.String("hook", res.Target),
				zap.ByteString("id", r.id), zap.String("tool", r.tool))
		case res.Pending:
			g.log.Warn("hook stopped at shutdown: kept in the hook store for the next start", zap.String("phase", phase),
				zap.String("hook", res.Target), zap.Int("attempts", res.Attempts), zap.ByteString("id", r.id), zap.String("tool", r.tool))
		case !res.OK:
			g.e.metrics.HookRan(phase, false)
			g.log.Error("hook failed: the work it was to undo or stop is orphaned", zap.String("phase", phase),
				zap.String("hook", res.Target), zap.Int("attempts", res.Attempts), zap.String("error", res.Error),
				zap.Int("output_bytes", len(res.Output)), zap.ByteString("id", r.id), zap.String("tool", r.tool))
			if g.e.opts.LogPayloads {
				g.log.Debug("failed hook's output", zap.String("phase", phase), zap.String("output", res.Output))
			}
		default:
			g.e.metrics.HookRan(phase, true)
			g.log.Info("hook ran", zap.String("phase", phase), zap.String("hook", res.Target),
				zap.Int("attempts", res.Attempts), zap.ByteString("id", r.id), zap.String("tool", r.tool))
		}
		g.mu.Lock()
		r.hooks = append(r.hooks, res)
		r.hooksPending--
		g.mu.Unlock()
		g.settle(r)
	})
}

// settle writes r's audit line once its story is over: the cancel handled,
// the hooks done, a tasks/cancel answered, and a late answer come (or the
// wait for one over, or never due).
func (g *governor) settle(r *record) {
	g.mu.Lock()
	ready := !r.written && !r.cancelled.IsZero() && r.cancelHandled && r.hooksPending == 0 && !r.taskPending &&
		(r.late != nil || !r.dispatched || r.windowOver || !r.answered.IsZero())
	if ready {
		r.written = true
		if g.calls[r.c] == r {
			delete(g.calls, r.c)
		}
		for _, t := range []Timer{r.lateTimer, r.restartTimer} {
			if t != nil {
				t.Stop()
			}
		}
	}
	var rec *Record
	if ready {
		rec = g.recordLocked(r)
	}
	g.mu.Unlock()
	if !ready {
		return
	}
	defer g.e.wg.Done()
	if rec.Status == StatusOrphan {
		g.e.metrics.Orphan()
	}
	if r.dispatched && r.answered.IsZero() && r.taskID == "" {
		g.e.metrics.CancelSettled(r.late == nil)
	}
	g.e.writeAudit(rec, g.log)
}

// recordLocked builds r's audit line.
func (g *governor) recordLocked(r *record) *Record {
	rec := &Record{Time: g.e.clock.Now(), Session: g.session, Direction: "client_to_server", ID: r.id,
		Method: r.method, Tool: r.tool, Rule: r.rule.Name, Source: r.source, Reason: r.reason,
		Started: r.started, Dispatched: r.dispatched, Notified: r.dispatched && r.answered.IsZero(),
		Late: r.late, TaskID: r.taskID, TaskCancel: r.taskCancel, Captured: r.captured, Hooks: r.hooks,
		Restarted: r.restarted}
	if r.taskID != "" && r.taskCancel != "" && r.taskCancel[0] != 'n' {
		rec.Notified = true // tasks/cancel was sent
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
	case !r.dispatched:
		return StatusNotDispatched
	case failed:
		return StatusOrphan
	case pending:
		return StatusCompensationPending
	case queued:
		return StatusQueued
	case r.taskID != "" && r.taskCancel == "cancelled":
		return StatusTaskCancelled
	case r.taskID != "" && r.taskCancel != "":
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

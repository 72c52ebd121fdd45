package policy

import (
	"cmp"
	"encoding/json"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/jobs"
)

// adoptEvery is how often a running proxy looks in the hook store for the
// jobs of proxies that have ended (and for jobs an operator retried there).
const adoptEvery = time.Minute

// forwardEvery is how often, with a fleet, the jobs kept in the local
// store while the fleet could not be reached are forwarded again.
const forwardEvery = 5 * time.Second

// startJobs takes over what the hook store holds at start (the jobs of
// earlier runs, adopted by jobs.Open) and looks again every adoptEvery
// (forwardEvery with a fleet); with a fleet, it starts taking the fleet's
// jobs.
func (e *Engine) startJobs() {
	if q := e.opts.Fleet; q != nil {
		e.stopWork = q.Work(e.work)
	}
	st := e.run.jobs.store
	if st == nil {
		return
	}
	all, err := st.List()
	if err != nil {
		e.log.Error("hook store: cannot read its jobs", zap.String("store", st.Path()), zap.Error(err))
	}
	e.take(all)
	e.adoptLater()
}

// adoptLater arms the next look for jobs of proxies that ended.
func (e *Engine) adoptLater() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return
	}
	every := adoptEvery
	if e.opts.Fleet != nil {
		every = forwardEvery
	}
	e.adopting = e.clock.AfterFunc(every, func() {
		adopted, err := e.run.jobs.store.Adopt()
		if err != nil {
			e.log.Warn("hook store: cannot adopt the jobs of a proxy that ended", zap.Error(err))
		}
		if e.opts.Fleet != nil {
			adopted, _ = e.run.jobs.store.List() // adopted or kept: forward what is pending
		}
		e.take(adopted)
		e.adoptLater()
	})
}

// stopJobs ends the looks and the resumptions; what runs finishes under
// the runner's shutdown.
func (e *Engine) stopJobs() {
	e.mu.Lock()
	e.stopped = true
	if e.adopting != nil {
		e.adopting.Stop()
	}
	stopWork := e.stopWork
	e.mu.Unlock()
	if stopWork != nil {
		stopWork()
	}
}

// take resumes the pending jobs of all (with a fleet: forwards them to
// it), and counts its orphans.
func (e *Engine) take(all []jobs.Job) {
	orphans := 0
	for _, j := range all {
		switch {
		case j.State == jobs.Orphaned:
			orphans++
		case e.opts.Fleet != nil:
			if !e.run.jobs.forward(&job{j}) {
				return // still unreachable: the next look tries again
			}
		case !e.resume(j):
			orphans++
		}
	}
	if len(all) > 0 && e.opts.Fleet == nil {
		e.run.jobs.countOrphans(orphans)
		e.log.Info("hook store: jobs of an earlier run taken over", zap.Int("resumed", len(all)-orphans),
			zap.Int("orphaned", orphans))
	}
}

// resume runs a stored job from where it stopped, and writes an audit
// line of its own once it ends (its request's line was written long ago,
// perhaps by another process). It reports false if the job is not run and
// was kept as an orphan (the caller counts it).
func (e *Engine) resume(j jobs.Job) bool {
	h, ev, why := e.hookOf(j)
	if h == nil {
		e.log.Error("hook store: a job is not run: "+why+"; kept as an orphan", zap.String("job", j.ID),
			zap.String("phase", j.Phase), zap.String("hook_digest", j.HookDigest))
		j.State, j.LastError = jobs.Orphaned, why
		e.run.jobs.put(&job{j}, nil)
		return false
	}
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return true
	}
	e.run.wg.Add(1)
	e.mu.Unlock()
	go func() {
		defer e.run.wg.Done()
		res := e.run.attempts(&job{j}, h, ev)
		e.metrics.HookRan(j.Phase, res.OK)
		e.resumed(ev, res, StatusResumedOK)
	}()
	return true
}

// resumed logs and audits how a job run apart from its request ended (a
// resumed one, a retried orphan, one from the fleet's queue); ok is the
// status if it succeeded.
func (e *Engine) resumed(ev *HookEvent, res HookResult, ok string) {
	rec := &Record{Time: e.clock.Now(), Started: cmp.Or(ev.Started, ev.Time), Session: ev.Session, Direction: ev.Direction, ID: ev.RequestID, Correlation: ev.Correlation, Method: ev.Method,
		Tool: ev.Tool, Source: ev.Source, Reason: ev.Reason, Dispatched: ev.Dispatched, Captured: ev.Captured,
		Hooks: []HookResult{res}, Resumed: true, Status: ok}
	if !e.opts.Audit.IncludeHookOutput {
		rec.Hooks[0].Output = ""
	}
	log := e.log.With(zap.String("phase", res.Phase), zap.String("hook", res.Target), zap.Int("attempts", res.Attempts),
		zap.String("tool", ev.Tool), zap.String("job", ev.IdempotencyKey))
	switch {
	case res.OK:
		log.Info("resumed hook ran", events.Mark(events.HookRan))
	case res.Pending:
		rec.Status = StatusCompensationPending
		log.Warn("resumed hook still pending at shutdown: kept for the next start", zap.String("error", res.Error))
	default:
		rec.Status = StatusOrphan
		e.metrics.Orphan()
		log.Error("resumed hook failed: the work it was to undo or stop is orphaned", events.Mark(events.HookFailed), zap.String("error", res.Error))
	}
	e.stories.note(rec, false)
	e.writeAudit(rec, func() *zap.Logger { return log })
}

// hookOf returns the hook of this proxy's configuration that a job names
// by its digest, and the job's event; or nil, and why the job is not run: it
// is in the format of earlier versions (which carried the definition
// itself), no hook of the policy in force has its digest (a forged job, or
// one made under a configuration since changed), or it cannot be read.
func (e *Engine) hookOf(j jobs.Job) (*Hook, *HookEvent, string) {
	switch {
	case j.HookDigest == "" && len(j.Definition) > 0:
		return nil, nil, "the job is in an earlier version's format, which carries its hook's definition: refused (a job must name a hook of this proxy's configuration by its digest)"
	case j.HookDigest == "":
		return nil, nil, "the job names no hook"
	}
	h := e.m.Load().hooks[j.HookDigest]
	if h == nil {
		return nil, nil, "no hook of this proxy's configuration has the job's digest (a forged job, or one made under a configuration since changed)"
	}
	ev := new(HookEvent)
	if err := json.Unmarshal(j.Event, ev); err != nil {
		return nil, nil, "the job's event cannot be read"
	}
	return h, ev, ""
}

// Jobs returns the jobs of the hook store: pending and orphaned.
func (e *Engine) Jobs() ([]jobs.Job, error) {
	if e.run.jobs.store == nil {
		return nil, errNoStore
	}
	return e.run.jobs.store.List()
}

// RetryJobs runs again, from now, the orphaned job with the given id, or
// every orphaned job if id is empty, with the hook's retries anew and the
// same idempotency key; it returns how many it started.
func (e *Engine) RetryJobs(id string) (int, error) {
	var again []jobs.Job
	if err := e.editOrphans(id, func(j jobs.Job) *jobs.Job {
		j.State, j.Attempts, j.NextAt = jobs.Pending, 0, time.Time{}
		again = append(again, j)
		return &j
	}); err != nil {
		return 0, err
	}
	n := 0
	for _, j := range again {
		if e.resume(j) {
			n++
		} else {
			e.run.jobs.countOrphans(1)
		}
	}
	if n == 0 && id != "" {
		return 0, fmt.Errorf("job %q is not run: its hook is not in this proxy's configuration (kept as an orphan)", id)
	}
	return n, nil
}

// DropJobs removes from the store the orphaned job with the given id, or
// every orphaned job if id is empty; it returns how many. (A pending job
// is running or about to: it cannot be dropped.)
func (e *Engine) DropJobs(id string) (int, error) {
	n := 0
	err := e.editOrphans(id, func(jobs.Job) *jobs.Job { n++; return nil })
	return n, err
}

// editOrphans applies f to the orphaned jobs id names (all, if empty).
func (e *Engine) editOrphans(id string, f func(jobs.Job) *jobs.Job) error {
	st := e.run.jobs.store
	if st == nil {
		return errNoStore
	}
	n, err := st.Edit(func(j jobs.Job) *jobs.Job {
		if j.State != jobs.Orphaned || (id != "" && j.ID != id) {
			return &j
		}
		return f(j)
	})
	e.run.jobs.countOrphans(-n)
	if err == nil && n == 0 && id != "" {
		err = fmt.Errorf("no orphaned job %q", id)
	}
	return err
}

// writeAudit writes an audit line, publishes it to the fleet's audit
// subject if one is set, and hands it to OnAudit. log gives the logger
// of a failure's line, made only then.
func (e *Engine) writeAudit(rec *Record, log func() *zap.Logger) {
	if err := e.audit.write(rec); err != nil {
		e.metrics.AuditFailed()
		if first, count := e.audit.failed(e.clock.Now()); first {
			log().Error("audit trail: a line could not be written (logged once a minute)", zap.Error(err), zap.Int("failures", count))
		}
	}
	if q, subject := e.opts.Fleet, e.opts.Audit.NATSSubject; q != nil && subject != "" {
		if line, err := json.Marshal(rec); err == nil {
			if err := q.PublishAudit(subject, line); err != nil {
				log().Debug("audit line not published to the fleet", zap.Error(err))
			}
		}
	}
	if e.opts.OnAudit != nil {
		e.opts.OnAudit(rec)
	}
}

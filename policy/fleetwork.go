package policy

import (
	"cmp"
	"encoding/json"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/fleet"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/jobs"
)

// work runs one attempt of a job from the fleet's queue: done, it leaves
// the queue; failed with retries left, it goes back to the queue, due after
// the hook's backoff, for any replica; failed for the last time, it leaves
// the queue and stays here as an orphan. The attempt number is the
// queue's count of deliveries, so a replica that died mid-attempt counts.
func (e *Engine) work(d *fleet.Delivery) {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		d.Retry(0) // another replica takes it now
		return
	}
	e.run.wg.Add(1)
	e.mu.Unlock()
	defer e.run.wg.Done()
	var h Hook
	var ev HookEvent
	if json.Unmarshal(d.Job.Hook, &h) != nil || json.Unmarshal(d.Job.Event, &ev) != nil || (len(h.Exec) == 0 && h.HTTP == nil) {
		e.log.Error("a fleet job cannot be read: kept here as an orphan", zap.String("job", d.Job.ID))
		d.GiveUp()
		e.keepOrphan(d.Job, d.Attempt, "the job cannot be read")
		return
	}
	res, ran := e.attemptFor(d, &h, &ev)
	switch {
	case !ran: // shutdown came first
		d.Retry(0)
		return
	case res.OK:
		d.Done()
	case d.Attempt <= h.Retries:
		wait := cmp.Or(h.Backoff, DefaultHookBackoff) << (d.Attempt - 1)
		e.log.Warn("fleet hook failed: retried by the fleet", zap.String("job", d.Job.ID), zap.Int("attempt", d.Attempt),
			zap.Duration("after", wait), zap.String("error", res.Error))
		d.Retry(wait)
		return
	default:
		d.GiveUp()
		e.keepOrphan(d.Job, d.Attempt, res.Error)
	}
	e.metrics.HookRan(res.Phase, res.OK)
	e.resumed(&ev, res, StatusFleetOK)
}

// attemptFor runs one attempt of h in its turn, telling the queue the job
// is in hand meanwhile; it reports false if shutdown came first.
func (e *Engine) attemptFor(d *fleet.Delivery, h *Hook, ev *HookEvent) (HookResult, bool) {
	r := e.run
	res := HookResult{Phase: d.Job.Phase, Target: h.target(), Attempts: d.Attempt}
	beat := time.NewTicker(e.opts.Fleet.AckWait() / 3)
	defer beat.Stop()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-beat.C:
				d.Working()
			case <-stop:
				return
			}
		}
	}()
	select {
	case r.sem <- struct{}{}:
	case <-r.ctx.Done():
		return res, false
	}
	start := time.Now()
	ev.Attempt = d.Attempt
	out, err := r.once(h, ev)
	<-r.sem
	res.Output, res.OK = out, err == nil
	if err != nil {
		res.Error = err.Error()
	}
	res.Duration = time.Since(start)
	res.Took = res.Duration.Round(time.Millisecond).String()
	return res, true
}

// keepOrphan keeps a fleet job whose retries ran out in the local store,
// for hooks list, retry and drop.
func (e *Engine) keepOrphan(j jobs.Job, attempts int, why string) {
	st := e.run.jobs.store
	if st == nil {
		return
	}
	j.State, j.Attempts, j.LastError = jobs.Orphaned, attempts, why
	e.run.jobs.put(&job{j}, nil)
	e.run.jobs.countOrphans(1)
}

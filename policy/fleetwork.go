package policy

import (
	"cmp"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
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
	h, ev, why := e.hookOf(d.Job)
	if h == nil {
		e.stray(d, why)
		return
	}
	res, ran := e.attemptFor(d, h, ev)
	switch {
	case !ran: // shutdown came first
		d.Retry(0)
		return
	case res.OK:
		d.Done()
	case d.Attempt <= h.Retries:
		wait := cmp.Or(h.Backoff, DefaultHookBackoff) << (d.Attempt - 1)
		e.log.Warn("fleet hook failed: retried by the fleet", events.Mark(events.HookFailed), zap.String("job", d.Job.ID), zap.Int("attempt", d.Attempt),
			zap.Duration("after", wait), zap.String("error", res.Error))
		d.Retry(wait)
		return
	default:
		d.GiveUp()
		e.keepOrphan(d.Job, d.Attempt, res.Error)
	}
	e.metrics.HookRan(res.Phase, res.OK)
	e.resumed(ev, res, StatusFleetOK)
}

// strayDelay is how long a fleet job whose hook this replica does not have
// waits before it is delivered again, to any replica (one whose
// configuration is newer, say, during a rolling update). Mutable for tests.
var strayDelay = 5 * time.Second

// stray handles a fleet job this replica does not run (why says why): one
// that names a hook by a digest goes back to the queue for another replica
// until its deliveries reach the queue's bound, and then stays here as an
// orphan; one that cannot name a hook (an earlier version's format, one
// that cannot be read) is an orphan at once. Every one is logged.
func (e *Engine) stray(d *fleet.Delivery, why string) {
	log := e.log.With(zap.String("job", d.Job.ID), zap.String("phase", d.Job.Phase), zap.String("hook_digest", d.Job.HookDigest),
		zap.Int("delivery", d.Attempt))
	if d.Job.HookDigest != "" && d.Job.Definition == nil && d.Attempt < e.opts.Fleet.MaxDeliver() {
		log.Warn("a fleet job is not run here: "+why+"; left to the fleet's other replicas", zap.Int("max_deliver", e.opts.Fleet.MaxDeliver()))
		d.Retry(strayDelay)
		return
	}
	log.Error("a fleet job is not run: " + why + "; kept here as an orphan")
	d.GiveUp()
	e.keepOrphan(d.Job, d.Attempt, why)
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
	if !r.turn() {
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

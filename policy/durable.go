package policy

import (
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/fleet"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/jobs"
)

// job is one hook invocation as the runner follows it: in memory, and in
// the hook store when there is one.
type job struct{ jobs.Job }

// durable writes the runner's jobs to the hook store, before the first
// attempt, after each failed one, and at the end (deleted once the hook
// succeeded; kept, orphaned, when its retries ran out; kept pending when
// shutdown stopped it). Without a store it keeps nothing, as before.
type durable struct {
	store   *jobs.Store  // nil: jobs live in memory only
	fleet   *fleet.Queue // nil: this process runs its own jobs
	log     *zap.Logger
	metrics Metrics

	mu      sync.Mutex // guards the fields below
	orphans int        // orphaned jobs in the store
	broken  bool       // a write failed: logged once
	cut     bool       // the fleet could not be reached: logged once until it can
}

// begin returns the job of a hook about to run for ev, written to the
// store first.
func (d *durable) begin(phase string, h *Hook, ev *HookEvent) *job {
	j := &job{jobs.Job{ID: ev.IdempotencyKey, Phase: phase, Target: h.target(), Tool: ev.Tool, Captured: ev.Captured,
		State: jobs.Pending, Created: time.Now()}}
	if d.store == nil && d.fleet == nil {
		return j
	}
	j.HookDigest = h.Digest()
	var err error
	j.Event, err = ev.marshal()
	if d.store != nil {
		d.put(j, err)
	}
	return j
}

// forward hands a job to the fleet, and reports whether the fleet has it
// (then the local store forgets it). While the fleet cannot be reached the
// job stays in the local store, to be forwarded later; without a local
// store it is run here.
func (d *durable) forward(j *job) bool {
	err := d.fleet.Publish(j.Job)
	d.mu.Lock()
	first := err != nil && !d.cut
	back := err == nil && d.cut
	d.cut = err != nil
	d.mu.Unlock()
	switch {
	case first:
		d.log.Warn("the fleet's job queue cannot be reached: hook jobs are kept in the local store and forwarded once it can (logged once until then)", events.Mark(events.FleetUnreachable),
			zap.Bool("local_store", d.store != nil), zap.Error(err))
	case back:
		d.log.Info("the fleet's job queue is reachable again: kept hook jobs are forwarded")
	}
	d.metrics.Forwarded(err == nil)
	if err != nil {
		return d.store != nil
	}
	if d.store != nil {
		d.put(nil, d.store.Delete(j.ID))
	}
	return true
}

// failed notes a failed attempt, and when the next one is due.
func (d *durable) failed(j *job, attempts int, why string, next time.Time) {
	j.Attempts, j.LastError, j.NextAt = attempts, why, next
	if d.store != nil {
		d.put(j, nil)
	}
}

// end records how the job ended, and reports whether it stays pending in
// the store, for the next start: what shutdown stopped.
func (d *durable) end(j *job, res HookResult, shutdown bool) (pending bool) {
	if d.store == nil {
		return false
	}
	switch {
	case res.OK:
		d.put(nil, d.store.Delete(j.ID))
		return false
	case shutdown:
		j.State = jobs.Pending
		d.put(j, nil)
		return true
	}
	j.State = jobs.Orphaned
	d.put(j, nil)
	d.countOrphans(1)
	return false
}

// put writes j (nil: only reports err); a store that fails is logged once,
// and the jobs run on in memory.
func (d *durable) put(j *job, err error) {
	if err == nil && j != nil {
		err = d.store.Put(&j.Job)
	}
	if err == nil {
		return
	}
	d.mu.Lock()
	first := !d.broken
	d.broken = true
	d.mu.Unlock()
	if first {
		d.log.Error("hook store: a job could not be written; hooks run on, but a restart may lose them (logged once)",
			zap.String("store", d.store.Path()), zap.Error(err))
	}
}

// countOrphans moves the orphans gauge by delta.
func (d *durable) countOrphans(delta int) {
	d.mu.Lock()
	d.orphans += delta
	n := d.orphans
	d.mu.Unlock()
	d.metrics.Orphans(n)
}

// errNoStore is the answer of the job operations without a store.
var errNoStore = errors.New("no hook store: set policy.hooks.store")

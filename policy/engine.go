package policy

import (
	"cmp"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/fleet"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/jobs"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
)

// Metrics is told what the policy does, for the admin listener. Its
// methods must be cheap and must not block.
type Metrics interface {
	DeadlineFired()
	// ClientTimeoutFired counts a call ended at its client's timeout, whose
	// budget came from the table of known clients (auto) or not.
	ClientTimeoutFired(auto bool)
	HookRan(phase string, ok bool)
	Orphan()
	// Orphans says how many orphaned jobs the hook store holds.
	Orphans(n int)
	// Forwarded counts a hook job handed to the fleet's queue (ok), or
	// kept in the local store because the queue could not be reached.
	Forwarded(ok bool)
	Waiting(delta int)
	// HooksWaiting moves the count of hooks waiting for a turn
	// (hooks.max_running are running).
	HooksWaiting(delta int)
	// CancelSettled says whether the upstream honoured a cancel: no answer
	// came within the late window.
	CancelSettled(honour string)
	// AuditFailed counts an audit line that could not be written.
	AuditFailed()
	// StoreDamaged counts a damaged hook store file set aside.
	StoreDamaged()
	// AnswersKept says how many suppressed answers reissue: join keeps
	// for re-issues, and their bytes.
	AnswersKept(bytes int64, n int)
	// AnswerDropped counts a kept answer dropped, the oldest, to stay
	// within Options.ReissueMemory and ReissueAnswers.
	AnswerDropped()
	// TasksHosted says how many tasks the proxy hosts (task: host), and
	// the bytes of their results.
	TasksHosted(bytes int64, n int)
	// TaskDropped counts a hosted task dropped, the oldest terminal one,
	// to stay within Options.TaskMemory and HostedTasks.
	TaskDropped()
}

// Options configures an Engine.
type Options struct {
	Policy  Policy
	Audit   Audit
	Logger  *zap.Logger
	Metrics Metrics // nil: none
	Clock   Clock   // nil: the real one
	// OnAudit, if set, is given each audit record once it is written.
	OnAudit func(*Record)
	// LogPayloads logs a failed hook's output, at debug level. Default
	// false: logs tell sizes and kinds, not payloads.
	LogPayloads bool
	// DefaultStore is the hook store's directory when the policy names
	// none (Policy.Hooks.Store empty). Unlike a store the policy names, one
	// that cannot be opened here is logged, and hooks live in memory.
	DefaultStore string
	// SharedStore, if set, is a directory whose dead proxies' jobs a
	// DefaultStore adopts too: the one store every server shared before
	// each had its own.
	SharedStore string
	// WebhookProxyFromEnv sends webhooks through the HTTP proxy the
	// environment names (http.proxy: env); a loopback one never.
	WebhookProxyFromEnv bool
	// Fleet, if set, is the fleet's job queue (cluster.nats): hooks go to
	// it, and this process's worker runs the fleet's jobs. The Engine
	// closes it at Shutdown.
	Fleet *fleet.Queue
	// PassEnv names the proxy's own environment variables (MCP_CANCEL_PROXY_*)
	// that exec hooks get; they get none other.
	PassEnv []string
	// MaxResponseHeaderBytes bounds a webhook answer's headers: 64 KiB if
	// zero.
	MaxResponseHeaderBytes int
	// WebhookIdle is how long a connection to a webhook is kept unused
	// (keepalive.DefaultIdle if zero).
	WebhookIdle time.Duration
	// ReissueMemory and ReissueAnswers bound the suppressed answers that
	// reissue: join keeps for re-issues, across the process, in bytes and
	// in entries, the oldest dropped first (DefaultReissueMemory,
	// DefaultReissueAnswers if zero).
	ReissueMemory  int64
	ReissueAnswers int
	// TaskMemory and HostedTasks bound the tasks hosted for clients
	// (task: host), across the process: the bytes of their results, and
	// how many there are, the oldest terminal task dropped first
	// (DefaultTaskMemory, DefaultHostedTasks if zero).
	TaskMemory  int64
	HostedTasks int
	// HostedTasksPerPrincipal bounds the tasks hosted for one principal,
	// and for one peer, where the process serves several clients
	// (proxy.Actions.Owner): HostedTasks/8 if zero.
	HostedTasksPerPrincipal int
	// TaskIDs mints hosted tasks' ids (nil: unguessable random ones); a
	// test's replay sets one that counts.
	TaskIDs func() string
}

// Engine runs the policy for the whole process: the rules (reloadable),
// the hooks, the queues and the audit trail. Sessions get a Governor each.
type Engine struct {
	opts    Options
	log     *zap.Logger
	m       atomic.Pointer[matcher]
	run     *runner
	audit   *auditWriter
	metrics Metrics
	clock   Clock
	wg      sync.WaitGroup // records not yet written

	stories stories // what the status page shows of past requests
	// joins are the calls that re-issues may join across the sessions
	// that several clients share (requests without a session), by a key
	// that names the client's credential (reissue.go).
	joins joins
	kept  *keptAnswers // the suppressed answers joins keep, bounded
	// hostedTasks bounds the tasks hosted for clients; taskID mints their ids.
	hostedTasks *hostedBound
	taskID      func() string
	// sessionless are the tasks hosted for requests without a session
	// (several clients'), by id: the client polls them on requests of
	// their own, each with a governor of its own (hosted.go).
	sessionless sync.Map
	// tasksExt: the server declared 2026-07-28's tasks extension, as one
	// governor learned (server/discover): requests without a session, each
	// with a governor of its own, ask this one server.
	tasksExt  atomic.Bool
	mu        sync.Mutex // guards governors and adopting
	governors map[*governor]bool
	adopting  Timer // the next look for jobs of proxies that ended
	stopped   bool
	stopWork  func()   // stops taking the fleet's jobs
	leftJobs  sync.Map // ids of the jobs of other configurations left in the store, said once each
}

// New starts an Engine.
func New(o Options) (*Engine, error) {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.Clock == nil {
		o.Clock = clock.Real
	}
	d := Defaults()
	if o.Policy.LateWindow <= 0 {
		o.Policy.LateWindow = d.LateWindow
	}
	if o.Policy.RestartAfter <= 0 {
		o.Policy.RestartAfter = d.RestartAfter
	}
	if o.Policy.Hooks.MaxRunning <= 0 {
		o.Policy.Hooks.MaxRunning = d.Hooks.MaxRunning
	}
	dial, dialTLS, err := webhookDialers(o.WebhookProxyFromEnv)
	if err != nil {
		return nil, err
	}
	aw, err := openAudit(o.Audit)
	if err != nil {
		return nil, err
	}
	e := &Engine{opts: o, log: o.Logger, audit: aw, metrics: o.Metrics, clock: o.Clock}
	if e.metrics == nil {
		e.metrics = noMetrics{}
	}
	e.kept = &keptAnswers{maxBytes: cmp.Or(o.ReissueMemory, DefaultReissueMemory), maxEntries: cmp.Or(o.ReissueAnswers, DefaultReissueAnswers),
		metrics: e.metrics}
	maxTasks := cmp.Or(o.HostedTasks, DefaultHostedTasks)
	e.hostedTasks = &hostedBound{maxBytes: cmp.Or(o.TaskMemory, DefaultTaskMemory), maxEntries: maxTasks,
		perOwner: cmp.Or(o.HostedTasksPerPrincipal, max(maxTasks/8, 1)), metrics: e.metrics}
	e.taskID = o.TaskIDs
	if e.taskID == nil {
		e.taskID = newTaskID
	}
	e.m.Store(compile(&o.Policy, e.fleetSlots())) // before the store: what it adopts depends on the hooks
	jobsKept := &durable{log: o.Logger, metrics: e.metrics, fleet: o.Fleet}
	if jobsKept.store, err = openStore(o, StoreDamageReport(o.Logger, e.metrics), e.wants); err != nil {
		aw.close()
		return nil, err
	}
	e.run = newRunner(o.Policy.Hooks.MaxRunning, jobsKept, o.PassEnv, o.MaxResponseHeaderBytes, o.WebhookIdle, dial, dialTLS)
	e.run.metrics = e.metrics
	e.startJobs()
	return e, nil
}

// fleetSlots returns what counts rules' slots fleet-wide, or nil without
// a fleet (such rules then count this process's requests: said once).
func (e *Engine) fleetSlots() func(string, int) distSlots {
	q := e.opts.Fleet
	if q == nil {
		for _, r := range e.opts.Policy.Rules {
			if r.MaxConcurrentScope == "cluster" {
				e.log.Warn("max_concurrent_scope: cluster without cluster.nats: counted per process")
				break
			}
		}
		return nil
	}
	return func(name string, n int) distSlots { return q.Semaphore(name, n) }
}

// StoreDamageReport returns what reports a damaged hook store file: a log
// line (once: the file is set aside) and the metric.
func StoreDamageReport(log *zap.Logger, m Metrics) func(jobs.Damage) {
	return func(d jobs.Damage) {
		log.Error("hook store: a damaged file was set aside; its jobs are not run (the proxy goes on)",
			zap.String("file", d.File), zap.String("set_aside_as", d.Aside), zap.Error(d.Err))
		if m != nil {
			m.StoreDamaged()
		}
	}
}

// wants reports whether the engine adopts a job a dead process left in the
// hook store: one whose hook its configuration has (or in an earlier
// version's format, to be refused and reported as before); with a fleet,
// every job, forwarded to the replicas, whose configurations may have it.
// A job of another configuration (the same server, another policy) stays
// where it is, for a proxy that has its hook: not adopted and called
// forged by a proxy that merely shares the server.
func (e *Engine) wants(j jobs.Job) bool {
	if e.opts.Fleet != nil || j.HookDigest == "" || e.m.Load().hooks[j.HookDigest] != nil {
		return true
	}
	if _, said := e.leftJobs.LoadOrStore(j.ID, true); !said {
		e.log.Info("hook store: a job of a hook this configuration does not have is left for a proxy that has it (hooks list shows it)",
			zap.String("job", j.ID), zap.String("phase", j.Phase), zap.String("hook_digest", j.HookDigest))
	}
	return false
}

// openStore opens the hook store the options name, if any, adopting the
// jobs wants accepts.
func openStore(o Options, report func(jobs.Damage), wants func(jobs.Job) bool) (*jobs.Store, error) {
	switch dir := o.Policy.Hooks.Store; dir {
	case "off":
		return nil, nil
	case "":
		if o.DefaultStore == "" {
			return nil, nil
		}
		st, err := jobs.OpenWanting(o.DefaultStore, report, wants)
		if err != nil {
			o.Logger.Warn("no hook store: hooks live in memory, and a restart loses those not done (set policy.hooks.store)",
				zap.Error(err))
			return nil, nil
		}
		if o.SharedStore != "" && o.SharedStore != o.DefaultStore {
			if _, err := st.AdoptFrom(o.SharedStore); err != nil {
				o.Logger.Warn("hook store: cannot adopt the jobs left in the shared store", zap.String("store", o.SharedStore), zap.Error(err))
			}
		}
		return st, nil
	default:
		st, err := jobs.OpenWanting(dir, report, wants)
		if err != nil { // a full disk, a read-only mount: serving MCP matters more
			o.Logger.Warn("the hook store cannot be written: hooks live in memory, and a restart loses those not done",
				zap.String("store", dir), zap.Error(err))
		}
		return st, nil
	}
}

// Reload puts a new policy in force for requests that start from now on;
// requests in flight keep the rule they started with. p must be valid.
func (e *Engine) Reload(p Policy) {
	e.m.Store(compile(&p, e.fleetSlots()))
	e.log.Info("policy reloaded", events.Mark(events.PolicyReloaded), zap.Int("rules", len(p.Rules)))
}

// Governor returns the factory of a session's Governor, for
// stdio.Options.Governor; session names the session in the audit trail.
func (e *Engine) Governor(session string) func(proxy.Actions) proxy.Governor {
	return func(a proxy.Actions) proxy.Governor { return newGovernor(e, session, a) }
}

// Shutdown waits for hooks running or waiting, up to the policy's
// shutdown wait; what is left ends as abandoned and is recorded as an
// orphan. Then it closes the audit trail. Governors should be closed first.
func (e *Engine) Shutdown() {
	e.mu.Lock()
	live := make([]*governor, 0, len(e.governors))
	for g := range e.governors {
		live = append(live, g)
	}
	e.mu.Unlock()
	for _, g := range live {
		g.Close()
	}
	e.stopJobs()
	e.run.shutdown(e.opts.Policy.Hooks.ShutdownWait)
	e.wg.Wait()
	if e.opts.Fleet != nil {
		e.opts.Fleet.Close()
	}
	if st := e.run.jobs.store; st != nil {
		st.Close()
	}
	e.audit.close()
}

// track adds or removes a live governor.
func (e *Engine) track(g *governor, live bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.governors == nil {
		e.governors = map[*governor]bool{}
	}
	if live {
		e.governors[g] = true
	} else {
		delete(e.governors, g)
	}
}

type noMetrics struct{}

func (noMetrics) DeadlineFired()          {}
func (noMetrics) ClientTimeoutFired(bool) {}
func (noMetrics) HookRan(string, bool)    {}
func (noMetrics) Orphan()                 {}
func (noMetrics) Orphans(int)             {}
func (noMetrics) Forwarded(bool)          {}
func (noMetrics) Waiting(int)             {}
func (noMetrics) HooksWaiting(int)        {}
func (noMetrics) CancelSettled(string)    {}
func (noMetrics) AuditFailed()            {}
func (noMetrics) StoreDamaged()           {}
func (noMetrics) AnswersKept(int64, int)  {}
func (noMetrics) AnswerDropped()          {}
func (noMetrics) TasksHosted(int64, int)  {}
func (noMetrics) TaskDropped()            {}

package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Policy counts what the per-tool policy does. It implements
// policy.Metrics for one upstream (the label of its honoured cancels).
type Policy struct {
	deadlines     prometheus.Counter
	clientTimes   *prometheus.CounterVec
	hooks         *prometheus.CounterVec
	orphans       prometheus.Counter
	stored        prometheus.Gauge
	forwarded     *prometheus.CounterVec
	waiting       prometheus.Gauge
	hooksWaiting  prometheus.Gauge
	restarts      prometheus.Counter
	settled       *prometheus.CounterVec
	auditFailures prometheus.Counter
	damaged       prometheus.Counter
	keptBytes     prometheus.Gauge
	keptAnswers   prometheus.Gauge
	keptDropped   prometheus.Counter
	hostedTasks   prometheus.Gauge
	hostedBytes   prometheus.Gauge
	tasksDropped  prometheus.Counter
	notify        prometheus.Histogram
	upstream      string
}

// NewPolicy registers the policy's collectors in m's registry; upstream
// names the server in mcp_cancel_proxy_cancels_settled_total.
func (m *Metrics) NewPolicy(upstream string) *Policy {
	p := &Policy{upstream: upstream,
		deadlines: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "mcp_cancel_proxy", Name: "deadlines_total",
			Help: "Requests the proxy cancelled because their deadline passed."}),
		clientTimes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "mcp_cancel_proxy", Name: "client_timeouts_total",
			Help: "Calls the proxy cancelled because their client's timeout (client_timeout) passed, by how the budget was set: " +
				"auto (the table of known clients) or fixed."}, []string{"budget"}),
		hooks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "mcp_cancel_proxy", Name: "hooks_total",
			Help: "Compensating hooks run, by phase (on_cancel, on_timeout, on_late_result, on_late_error) and outcome (ok, failed)."},
			[]string{"phase", "outcome"}),
		orphans: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "mcp_cancel_proxy", Name: "orphans_total",
			Help: "Requests whose compensation failed: work left running or results left in place."}),
		stored: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "mcp_cancel_proxy", Name: "hook_orphans",
			Help: "Orphaned hook jobs the hook store holds now: retries ran out, kept for mcp-cancel-proxy hooks retry or drop."}),
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "mcp_cancel_proxy", Name: "hook_jobs_forwarded_total",
			Help: "Hook jobs handed to the fleet's queue (outcome ok), or kept in the local store because it could not be reached (kept_local)."},
			[]string{"outcome"}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "mcp_cancel_proxy", Name: "requests_waiting",
			Help: "Requests waiting in the proxy for a slot of their rule's max_concurrent."}),
		hooksWaiting: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "mcp_cancel_proxy", Name: "hooks_waiting",
			Help: "Compensating hooks waiting for a turn: hooks.max_running of them are running."}),
		restarts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "mcp_cancel_proxy", Name: "restarts_total",
			Help: "Server restarts by escalate: restart."}),
		settled: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "mcp_cancel_proxy", Name: "cancels_settled_total",
			Help: "Cancels forwarded upstream, by what showed of the server's stop within policy.late_window: honoured=true (an error answer, a restart), false (a result anyway), forwarded (nothing)."},
			[]string{"upstream", "honoured"}),
		auditFailures: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "mcp_cancel_proxy", Name: "audit_write_failures_total",
			Help: "Audit lines that could not be written (a full disk): none of them is left half written."}),
		damaged: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "mcp_cancel_proxy", Name: "hook_store_damaged_files_total",
			Help: "Hook store files found damaged (cut short by a crash or a full disk, or not store files) and set aside as NAME.corrupt-TIMESTAMP."}),
		keptBytes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "mcp_cancel_proxy", Name: "reissue_kept_bytes",
			Help: "Bytes of the suppressed answers reissue: join keeps for re-issues (bounded by limits.reissue_memory)."}),
		keptAnswers: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "mcp_cancel_proxy", Name: "reissue_kept_answers",
			Help: "Suppressed answers reissue: join keeps for re-issues (bounded by limits.reissue_answers)."}),
		keptDropped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "mcp_cancel_proxy", Name: "reissue_answers_dropped_total",
			Help: "Kept answers dropped, the oldest first, to stay within limits.reissue_memory and limits.reissue_answers."}),
	}
	p.hostedTasks = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "mcp_cancel_proxy", Name: "hosted_tasks",
		Help: "Tasks the proxy hosts for clients (task: host), working or kept with their results (bounded by limits.hosted_tasks)."})
	p.hostedBytes = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "mcp_cancel_proxy", Name: "hosted_task_bytes",
		Help: "Bytes of the results of the tasks the proxy hosts (bounded by limits.task_memory)."})
	p.tasksDropped = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "mcp_cancel_proxy", Name: "hosted_tasks_dropped_total",
		Help: "Hosted tasks dropped, the oldest terminal first, to stay within limits.task_memory and limits.hosted_tasks."})
	p.notify = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "mcp_cancel_proxy", Name: "cancel_notify_seconds",
		Help: "Time from the proxy accepting a cancel to the upstream being notified: the notification written to a stdio " +
			"server's stdin, or answered by an HTTP upstream.",
		Buckets: prometheus.ExponentialBuckets(50e-6, 4, 10)}) // 50 µs to 13 s
	m.Registry.MustRegister(p.deadlines, p.clientTimes, p.hooks, p.orphans, p.stored, p.forwarded, p.waiting, p.hooksWaiting, p.restarts, p.settled,
		p.auditFailures, p.damaged, p.keptBytes, p.keptAnswers, p.keptDropped, p.notify, p.hostedTasks, p.hostedBytes, p.tasksDropped)
	return p
}

// CancelNotified observes the time from a cancel to the upstream notified.
func (p *Policy) CancelNotified(d time.Duration) { p.notify.Observe(d.Seconds()) }

// DeadlineFired counts a deadline.
func (p *Policy) DeadlineFired() { p.deadlines.Inc() }

// ClientTimeoutFired counts a client timeout, auto or fixed.
func (p *Policy) ClientTimeoutFired(auto bool) {
	p.clientTimes.WithLabelValues(map[bool]string{true: "auto", false: "fixed"}[auto]).Inc()
}

// HookRan counts a hook's outcome.
func (p *Policy) HookRan(phase string, ok bool) {
	outcome := "ok"
	if !ok {
		outcome = "failed"
	}
	p.hooks.WithLabelValues(phase, outcome).Inc()
}

// Orphan counts a failed compensation.
func (p *Policy) Orphan() { p.orphans.Inc() }

// Orphans sets the gauge of orphaned jobs in the hook store.
func (p *Policy) Orphans(n int) { p.stored.Set(float64(n)) }

// StoreDamaged counts a damaged hook store file set aside.
func (p *Policy) StoreDamaged() { p.damaged.Inc() }

// AnswersKept sets the gauges of the answers reissue: join keeps.
func (p *Policy) AnswersKept(bytes int64, n int) {
	p.keptBytes.Set(float64(bytes))
	p.keptAnswers.Set(float64(n))
}

// AnswerDropped counts a kept answer dropped for the bound.
func (p *Policy) AnswerDropped() { p.keptDropped.Inc() }

// TasksHosted sets the gauges of the tasks hosted for clients.
func (p *Policy) TasksHosted(bytes int64, n int) {
	p.hostedBytes.Set(float64(bytes))
	p.hostedTasks.Set(float64(n))
}

// TaskDropped counts a hosted task dropped for the bound.
func (p *Policy) TaskDropped() { p.tasksDropped.Inc() }

// Forwarded counts a hook job forwarded to the fleet, or kept locally.
func (p *Policy) Forwarded(ok bool) {
	outcome := "ok"
	if !ok {
		outcome = "kept_local"
	}
	p.forwarded.WithLabelValues(outcome).Inc()
}

// Waiting moves the waiting gauge.
func (p *Policy) Waiting(delta int) { p.waiting.Add(float64(delta)) }

// HooksWaiting moves the gauge of hooks waiting for a turn.
func (p *Policy) HooksWaiting(delta int) { p.hooksWaiting.Add(float64(delta)) }

// CancelSettled counts a forwarded cancel by what showed of the server's
// stop: "true" (seen), "false" (it answered with a result anyway),
// "forwarded" (nothing showed).
func (p *Policy) CancelSettled(honour string) {
	p.settled.WithLabelValues(p.upstream, honour).Inc()
}

// AuditFailed counts an audit line not written.
func (p *Policy) AuditFailed() { p.auditFailures.Inc() }

// Restarted counts a restart.
func (p *Policy) Restarted() { p.restarts.Inc() }

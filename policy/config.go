// Package policy acts on the work behind a request, per tool, from the
// YAML policy: deadlines, compensating hooks for cancelled and late work,
// queues for tools that take only so many calls at once, tasks/cancel for
// task-augmented calls, and an audit trail that says plainly what was
// stopped and what was not.
//
// A Policy is the configuration; an Engine runs it for the whole process
// (hooks, audit, queues); a Governor, one per session, is what the proxy's
// tracker consults on every client request (it implements proxy.Governor).
package policy

import (
	"cmp"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Policy is the policy section of the configuration file.
type Policy struct {
	// Defaults apply to every request that no rule overrides.
	Defaults Rule `yaml:"defaults"`
	// Rules are tried in order; the first whose tool or method matches wins.
	Rules []Rule `yaml:"rules"`
	// Hooks bounds the hooks' running.
	Hooks HookLimits `yaml:"hooks"`
	// LateWindow is how long after a cancel a late answer is waited for
	// before the request's audit line is written: a cancel with no answer
	// within it counts as honoured. Default 30s.
	LateWindow time.Duration `yaml:"late_window"`
	// RestartAfter is how long a cancelled request of an escalate: restart
	// rule may stay unanswered before the server is restarted. Default 2s.
	RestartAfter time.Duration `yaml:"restart_after"`
	// MaxRestarts caps escalation restarts in any ten minutes; beyond, the
	// server is left running and the refusal logged. Default 3.
	MaxRestarts int `yaml:"max_restarts"`
	// ClientTimeouts is what client_timeout: auto knows of clients, beside
	// the table the proxy ships with.
	ClientTimeouts ClientTimeouts `yaml:"client_timeouts"`
}

// Rule is what to do with the requests it matches. Unset fields take the
// defaults' values.
type Rule struct {
	// Tool matches tools/call requests by tool name (a glob: * matches any
	// run of characters, / included; ?, [a-z]).
	Tool string `yaml:"tool"`
	// Method matches requests by method (a glob). A rule has Tool or Method.
	Method string `yaml:"method"`
	// Timeout is the request's deadline; 0 means none.
	Timeout *time.Duration `yaml:"timeout"`
	// ResetOnProgress pushes the deadline back by Timeout on each progress
	// notification, never past MaxTimeout after the start.
	ResetOnProgress *bool `yaml:"reset_on_progress"`
	// MaxTimeout caps the deadline when progress resets it; 0 means none.
	MaxTimeout *time.Duration `yaml:"max_timeout"`
	// ClientTimeout is how long the client waits for a call before it
	// gives up without a cancel: a duration, auto (from the client's name
	// and version, for tools/call) or off (the default). When it passes,
	// the call is ended as at a deadline, with the source client_timeout.
	// Never for initialize, nor for a call answered with a task.
	ClientTimeout *ClientTimeout `yaml:"client_timeout"`
	// Interruptible says whether the server stops this tool on a cancel.
	// false: the cancel is still forwarded, but stopping is left to the
	// hooks, and the audit trail says so. Default true.
	Interruptible *bool `yaml:"interruptible"`
	// Capture names values to read, by JSON pointer (or a list of them,
	// the first that points at something wins), from the request's progress
	// notifications (their params) and from its result.
	Capture map[string]Pointers `yaml:"capture"`
	// Correlate names values to read, by JSON pointer, from the request's
	// params when it starts: the id of the client's own run or job (say
	// /_meta/runId), carried apart from the MCP request id and from the
	// captured values in the audit line, the hook events and the logs.
	// Only strings and numbers are copied, and never a key that names a
	// credential (a token, a secret, a password, authorization, a cookie).
	Correlate map[string]Pointers `yaml:"correlate"`
	// OnCancel runs when the request is cancelled: by the client, a
	// disconnect, the session's end or shutdown (and a deadline, unless
	// OnTimeout is set).
	OnCancel *Hook `yaml:"on_cancel"`
	// OnTimeout runs when the request's deadline passes.
	OnTimeout *Hook `yaml:"on_timeout"`
	// OnLateResult runs when a result arrives after the cancel.
	OnLateResult *Hook `yaml:"on_late_result"`
	// OnLateError runs when an error response arrives after the cancel.
	OnLateError *Hook `yaml:"on_late_error"`
	// MaxConcurrent caps the matching requests in flight at once; more wait
	// in the proxy, in arrival order. 0 means no cap.
	MaxConcurrent int `yaml:"max_concurrent"`
	// MaxConcurrentScope is what max_concurrent counts: "process" (this
	// proxy's requests; the default) or "cluster" (the fleet's, with
	// cluster.nats: a slot is a lease in NATS that a replica that dies
	// gives up when the lease passes).
	MaxConcurrentScope string `yaml:"max_concurrent_scope"`
	// Escalate "restart" (stdio wrapper only) restarts the server after a
	// cancel of a matching request that was not answered within the grace.
	Escalate string `yaml:"escalate"`
	// Reissue "join" (tools/call rules only) makes a re-issue of a call
	// still running upstream, or whose answer was suppressed within
	// ReissueWindow, join it instead of starting the work again: the same
	// tool and arguments (or ReissueKey's value) in the same session. The
	// re-issue is not sent; it gets the earlier call's answer and, over
	// stdio, its progress. A client's cancel of such a call reaches the
	// server only ReissueGrace later, if no re-issue joined it. Default
	// off.
	Reissue string `yaml:"reissue"`
	// ReissueWindow is how long a suppressed answer still serves a
	// re-issue. Default 5m.
	ReissueWindow *time.Duration `yaml:"reissue_window"`
	// ReissueKey, a JSON pointer into the request's params (say
	// /arguments/order_id, or /_meta/idempotencyKey), names what makes two
	// calls the same in place of all their arguments: for arguments that
	// carry a nonce or a timestamp.
	ReissueKey string `yaml:"reissue_key"`
	// ReissueGrace is how long a client's cancel of a reissue: join call
	// waits for a re-issue before it goes to the server. Default 30s.
	ReissueGrace *time.Duration `yaml:"reissue_grace"`
	// Task "host" (tools/call rules only) runs a task for a client that
	// asks for one (params.task, 2025-11-25) on a server that runs the tool
	// only as a plain call: the client gets a task at once, the proxy runs
	// the call upstream and serves tasks/get, tasks/result, tasks/list and
	// tasks/cancel (docs/tasks.md). Default off.
	Task string `yaml:"task"`
	// TaskTTL is the longest a hosted task is kept from its creation, and
	// its ttl when the client asks for none: a task still working then is
	// cancelled upstream. Default 1h.
	TaskTTL *time.Duration `yaml:"task_ttl"`
	// TaskPollInterval is the pollInterval a hosted task suggests. Default 1s.
	TaskPollInterval *time.Duration `yaml:"task_poll_interval"`
	// TaskAfter (protocol 2026-07-28, whose client does not ask for a task
	// but declares the tasks extension): a call still running this long is
	// answered with a task; one answered sooner gets its plain answer.
	// Default 0s: a task at once.
	TaskAfter *time.Duration `yaml:"task_after"`
}

// Hook is a compensating action: a command, or an HTTP POST, given the
// event as a JSON document.
type Hook struct {
	// Exec is the command's argv (no shell); the event is on its stdin.
	Exec []string `yaml:"exec"`
	// HTTP POSTs the event to a URL.
	HTTP *HTTPHook `yaml:"http"`
	// Timeout bounds each attempt. Default 10s.
	Timeout time.Duration `yaml:"timeout"`
	// Retries is how many times a failed attempt is retried. Default 0.
	Retries int `yaml:"retries"`
	// Backoff is the wait before the first retry, doubled for each next
	// one. Default 1s.
	Backoff time.Duration `yaml:"backoff"`
}

// HTTPHook is a webhook target. Its URL and header values may name
// environment variables as ${NAME}, as --header does (an unset one is an
// error at validate and at start; $$ is a $): the hook is sent with them
// taken in, and is named (Digest), shown and kept as written, so that a
// rotated secret neither shows nor orphans its stored and queued jobs.
type HTTPHook struct {
	URL string `yaml:"url"`
	// Headers are added to the POST (an Authorization header, say).
	Headers map[string]string `yaml:"headers"`
	// Timeout, if set, overrides the hook's.
	Timeout time.Duration `yaml:"timeout"`
	// RedactPath hides the URL's whole path wherever the hook is shown
	// (logs, the audit trail, the status page, hooks list), for a webhook
	// whose path is its secret. Userinfo and query values are always
	// hidden, and the paths of well-known webhook hosts (Slack, Discord,
	// Teams...). Default false.
	RedactPath bool `yaml:"redact_path"`
}

// HookLimits bounds the hooks of the whole process.
type HookLimits struct {
	// MaxRunning caps hooks running at once; more wait their turn. Default 8.
	MaxRunning int `yaml:"max_running"`
	// ShutdownWait is how long shutdown waits for running and queued
	// hooks; what is left is recorded as orphaned, or, with a Store, kept
	// pending there for the next start. Default 30s.
	ShutdownWait time.Duration `yaml:"shutdown_wait"`
	// Store is the hook store's directory: each hook invocation is written
	// there before its first attempt and kept until it succeeds, so that
	// a restart resumes it, and one whose retries ran out stays as an
	// orphan (mcp-cancel-proxy hooks list). Empty or "off": none, hooks
	// live in memory only. It takes effect at start, not on reload.
	Store string `yaml:"store"`
}

// Defaults returns the policy used when the file has none: no deadline,
// no rules.
func Defaults() Policy {
	zero, no, yes := time.Duration(0), false, true
	max, grace := zero, DefaultClientGrace
	return Policy{
		Defaults:   Rule{Timeout: &zero, MaxTimeout: &max, ResetOnProgress: &no, Interruptible: &yes, ClientTimeout: &ClientTimeout{}},
		Hooks:      HookLimits{MaxRunning: 8, ShutdownWait: 30 * time.Second},
		LateWindow: 30 * time.Second, RestartAfter: 2 * time.Second, MaxRestarts: 3,
		ClientTimeouts: ClientTimeouts{Grace: &grace}}
}

// Problem is one invalid setting; Path names it as the file does
// ("policy.rules[2].timeout"), for the loader to find its line.
type Problem struct {
	Path string
	Msg  string
}

func (p *Problem) Error() string { return p.Path + ": " + p.Msg }

// NewProblem returns the Problem at path, its message formatted as by
// fmt.Sprintf with every string argument cut to 200 bytes (an error's text
// to 300): a value of
// 50 MiB in a file is not echoed whole.
func NewProblem(path, format string, a ...any) *Problem {
	for i, v := range a {
		switch v := v.(type) {
		case string:
			a[i] = cut(v, 200)
		case error:
			a[i] = cut(v.Error(), 300)
		}
	}
	return &Problem{Path: path, Msg: fmt.Sprintf(format, a...)}
}

// Validate reports every invalid setting at once, each as a *Problem.
func (p *Policy) Validate(prefix string) error {
	var errs []error
	bad := func(at, format string, a ...any) {
		errs = append(errs, NewProblem(prefix+at, format, a...))
	}
	d := &p.Defaults
	if d.Tool != "" || d.Method != "" {
		bad(".defaults", "defaults match every request: tool and method have no place here")
	}
	if d.MaxConcurrent != 0 || d.MaxConcurrentScope != "" || d.Escalate != "" || d.Reissue != "" || d.ReissueKey != "" ||
		d.ReissueWindow != nil || d.ReissueGrace != nil || d.Task != "" || d.TaskTTL != nil || d.TaskPollInterval != nil || d.TaskAfter != nil {
		bad(".defaults", "max_concurrent, max_concurrent_scope, escalate, reissue and task belong to a rule, not the defaults")
	}
	d.validate(".defaults", bad)
	for i := range p.Rules {
		r := &p.Rules[i]
		at := fmt.Sprintf(".rules[%d]", i)
		switch {
		case r.Tool == "" && r.Method == "":
			bad(at, "a rule needs tool or method")
		case r.Tool != "" && r.Method != "":
			bad(at, "a rule has tool or method, not both (tool implies method tools/call)")
		}
		for _, g := range []struct{ key, glob string }{{"tool", r.Tool}, {"method", r.Method}} {
			if _, err := compileGlob(g.glob); err != nil {
				bad(at+"."+g.key, "%v", err)
			}
		}
		if r.MaxConcurrent < 0 {
			bad(at+".max_concurrent", "must not be negative, got %d", r.MaxConcurrent)
		}
		if sc := r.MaxConcurrentScope; sc != "" && sc != "process" && sc != "cluster" {
			bad(at+".max_concurrent_scope", "%q is not process or cluster", sc)
		}
		if r.Escalate != "" && r.Escalate != "restart" {
			bad(at+".escalate", "%q is not restart (or empty)", r.Escalate)
		}
		r.validateReissue(at, bad)
		r.validateTask(at, bad)
		r.validate(at, bad)
	}
	if p.Hooks.MaxRunning <= 0 {
		bad(".hooks.max_running", "must be positive, got %d", p.Hooks.MaxRunning)
	}
	if p.Hooks.ShutdownWait < 0 {
		bad(".hooks.shutdown_wait", "must not be negative, got %v", p.Hooks.ShutdownWait)
	}
	if p.LateWindow <= 0 {
		bad(".late_window", "must be positive, got %v", p.LateWindow)
	}
	if p.RestartAfter <= 0 {
		bad(".restart_after", "must be positive, got %v", p.RestartAfter)
	}
	if p.MaxRestarts < 0 {
		bad(".max_restarts", "must not be negative, got %d", p.MaxRestarts)
	}
	p.ClientTimeouts.validate(".client_timeouts", bad)
	return errors.Join(errs...)
}

// validate checks the fields rules and defaults share.
func (r *Rule) validate(at string, bad func(at, format string, a ...any)) {
	if r.Timeout != nil && *r.Timeout < 0 {
		bad(at+".timeout", "must not be negative, got %v", *r.Timeout)
	}
	if r.MaxTimeout != nil && *r.MaxTimeout < 0 {
		bad(at+".max_timeout", "must not be negative, got %v", *r.MaxTimeout)
	}
	if r.ClientTimeout != nil && r.ClientTimeout.Wait < 0 {
		bad(at+".client_timeout", "must not be negative, got %v", r.ClientTimeout.Wait)
	}
	if r.Timeout != nil && r.MaxTimeout != nil && *r.MaxTimeout > 0 && *r.MaxTimeout < *r.Timeout {
		bad(at+".max_timeout", "%v is shorter than timeout %v", *r.MaxTimeout, *r.Timeout)
	}
	for key, m := range map[string]map[string]Pointers{"capture": r.Capture, "correlate": r.Correlate} {
		for name, ptrs := range m {
			if len(ptrs) == 0 {
				bad(at+"."+key+"."+name, "no JSON pointer")
			}
			for _, ptr := range ptrs {
				p, err := parsePointer(ptr)
				switch {
				case err != nil:
					bad(at+"."+key+"."+name, "%v", err)
				case key == "correlate" && len(p) > 0 && credential.MatchString(p[len(p)-1]):
					bad(at+"."+key+"."+name, "%s names a credential: it is never copied", ptr)
				}
			}
		}
	}
	for _, h := range []struct {
		key  string
		hook *Hook
	}{{"on_cancel", r.OnCancel}, {"on_timeout", r.OnTimeout}, {"on_late_result", r.OnLateResult}, {"on_late_error", r.OnLateError}} {
		if h.hook != nil {
			h.hook.validate(at+"."+h.key, bad)
		}
	}
}

func (h *Hook) validate(at string, bad func(at, format string, a ...any)) {
	switch {
	case len(h.Exec) == 0 && h.HTTP == nil:
		bad(at, "a hook needs exec or http")
	case len(h.Exec) > 0 && h.HTTP != nil:
		bad(at, "a hook has exec or http, not both")
	case len(h.Exec) > 0 && h.Exec[0] == "":
		bad(at+".exec", "the command is empty")
	case h.HTTP != nil:
		target, _, err := h.HTTP.expanded()
		if err != nil {
			bad(at+".http", "%v", err)
			break
		}
		u, err := url.Parse(target)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			if shown := RedactURL(h.HTTP.URL, true); shown != "" {
				bad(at+".http.url", "%q is not an http(s) URL with a host", shown)
			} else {
				bad(at+".http.url", "not a URL with a host")
			}
		}
		if h.HTTP.Timeout < 0 {
			bad(at+".http.timeout", "must not be negative, got %v", h.HTTP.Timeout)
		}
	}
	if h.Timeout < 0 {
		bad(at+".timeout", "must not be negative, got %v", h.Timeout)
	}
	if h.Retries < 0 || h.Retries > 100 {
		bad(at+".retries", "must be within 0..100, got %d", h.Retries)
	}
	if h.Backoff < 0 {
		bad(at+".backoff", "must not be negative, got %v", h.Backoff)
	}
}

// Effective is a rule with the defaults filled in: what applies to one
// request, fixed when the request starts.
type Effective struct {
	Name            string // which rule: "rules[2]" or "defaults"
	Timeout         time.Duration
	ResetOnProgress bool
	MaxTimeout      time.Duration
	ClientTimeout   ClientTimeout
	Interruptible   bool
	Capture         map[string][]pointer
	Correlate       map[string][]pointer
	OnCancel        *Hook
	OnTimeout       *Hook
	OnLateResult    *Hook
	OnLateError     *Hook
	MaxConcurrent   int
	Cluster         bool // MaxConcurrent counts the fleet's requests
	Escalate        string
	// Reissue: the rule's calls may be joined by their re-issues, by
	// ReissueKey's value (nil: all the arguments), within ReissueWindow of
	// a suppressed answer; a client's cancel waits ReissueGrace.
	Reissue       bool
	ReissueKey    pointer
	ReissueWindow time.Duration
	ReissueGrace  time.Duration
	// TaskHost: the rule's task-augmented calls are hosted (task: host),
	// kept TaskTTL at most, suggesting TaskPoll between polls.
	TaskHost  bool
	TaskTTL   time.Duration
	TaskPoll  time.Duration
	TaskAfter time.Duration
	slot      *slots // the rule's queue when MaxConcurrent > 0
}

// resolve fills r's unset fields from d.
func resolve(name string, r, d *Rule) *Effective {
	e := &Effective{Name: name, Interruptible: true, MaxConcurrent: r.MaxConcurrent, Escalate: r.Escalate,
		Cluster: r.MaxConcurrentScope == "cluster"}
	pick := func(rv, dv *time.Duration) time.Duration {
		if rv != nil {
			return *rv
		}
		if dv != nil {
			return *dv
		}
		return 0
	}
	e.Timeout = pick(r.Timeout, d.Timeout)
	e.MaxTimeout = pick(r.MaxTimeout, d.MaxTimeout)
	if ct := cmp.Or(r.ClientTimeout, d.ClientTimeout); ct != nil {
		e.ClientTimeout = *ct
	}
	for _, b := range []struct {
		dst    *bool
		rv, dv *bool
	}{{&e.ResetOnProgress, r.ResetOnProgress, d.ResetOnProgress}, {&e.Interruptible, r.Interruptible, d.Interruptible}} {
		switch {
		case b.rv != nil:
			*b.dst = *b.rv
		case b.dv != nil:
			*b.dst = *b.dv
		}
	}
	e.Capture = pointers(d.Capture, r.Capture)
	e.Correlate = pointers(d.Correlate, r.Correlate)
	e.OnCancel = firstHook(r.OnCancel, d.OnCancel)
	e.OnTimeout = firstHook(r.OnTimeout, d.OnTimeout)
	e.OnLateResult = firstHook(r.OnLateResult, d.OnLateResult)
	e.OnLateError = firstHook(r.OnLateError, d.OnLateError)
	if r.Task == "host" {
		e.TaskHost, e.TaskTTL, e.TaskPoll, e.TaskAfter = true, orDefault(r.TaskTTL, DefaultTaskTTL), orDefault(r.TaskPollInterval, DefaultTaskPoll), orDefault(r.TaskAfter, 0)
	}
	if r.Reissue == "join" {
		e.Reissue, e.ReissueWindow, e.ReissueGrace = true, orDefault(r.ReissueWindow, DefaultReissueWindow), orDefault(r.ReissueGrace, DefaultReissueGrace)
		if r.ReissueKey != "" {
			e.ReissueKey, _ = parsePointer(r.ReissueKey) // validated
		}
	}
	return e
}

// pointers parses the pointers of the defaults and of a rule, the rule's
// replacing the defaults' of the same name.
func pointers(d, r map[string]Pointers) map[string][]pointer {
	out := map[string][]pointer{}
	for _, src := range []map[string]Pointers{d, r} {
		for k, ptrs := range src {
			out[k] = nil
			for _, v := range ptrs {
				p, _ := parsePointer(v) // validated
				out[k] = append(out[k], p)
			}
		}
	}
	return out
}

// credential matches the keys correlate never copies: a correlate pointer
// ending in one is an error. Those of the last release's warnings (pwd,
// jwt, private_key...) are refused now, and a session id, which in MCP is
// the session's bearer, with them.
var credential = regexp.MustCompile(`(?i)token|secret|passw|auth|credential|api[-_]?key|cookie|bearer|pwd|jwt|private[-_]?key|passphrase|access[-_]?key|signature|session[-_]?id`)

func firstHook(a, b *Hook) *Hook {
	if a != nil {
		return a
	}
	return b
}

// matcher is a compiled policy: effective rules in order, and the defaults.
type matcher struct {
	rules    []Rule
	globs    []*glob // each rule's tool or method glob
	eff      []*Effective
	defaults *Effective
	hooks    map[string]*Hook // every hook, by digest
	clients  *clientTable     // what client_timeout: auto knows
	hosting  bool             // some rule hosts tasks (task: host)
}

// compile compiles p; fleet, if set, counts the slots of rules whose
// max_concurrent_scope is cluster.
func compile(p *Policy, fleet func(name string, n int) distSlots) *matcher {
	m := &matcher{rules: p.Rules, defaults: resolve("defaults", &Rule{}, &p.Defaults), hooks: hooksOf(p),
		clients: newClientTable(&p.ClientTimeouts)}
	for i := range p.Rules {
		g, _ := compileGlob(cmp.Or(p.Rules[i].Tool, p.Rules[i].Method)) // validated
		m.globs = append(m.globs, g)
		e := resolve(fmt.Sprintf("rules[%d]", i), &p.Rules[i], &p.Defaults)
		switch {
		case e.MaxConcurrent > 0 && e.Cluster && fleet != nil:
			e.slot = newFleetSlots(fleet(fmt.Sprintf("%d %s", i, cmp.Or(p.Rules[i].Tool, p.Rules[i].Method)), e.MaxConcurrent))
		case e.MaxConcurrent > 0:
			e.slot = newSlots(e.MaxConcurrent)
		}
		m.eff = append(m.eff, e)
		m.hosting = m.hosting || e.TaskHost
	}
	return m
}

// match returns what applies to a request with method and, for tools/call,
// tool name: the first matching rule, or the defaults.
func (m *matcher) match(method, tool string) *Effective {
	for i := range m.rules {
		switch {
		case m.rules[i].Tool != "":
			if method == "tools/call" && m.globs[i].match(tool) {
				return m.eff[i]
			}
		case m.globs[i].match(method):
			return m.eff[i]
		}
	}
	return m.defaults
}

// active reports whether the effective rule asks anything of a request.
func (e *Effective) active() bool {
	return e.Timeout > 0 || len(e.Capture) > 0 || len(e.Correlate) > 0 || e.OnCancel != nil || e.OnTimeout != nil ||
		e.OnLateResult != nil || e.OnLateError != nil || e.slot != nil || e.Escalate != "" || !e.Interruptible || e.Reissue ||
		e.TaskHost
}

// hasHooks reports whether any hook is set.
func (e *Effective) hasHooks() bool {
	return e.OnCancel != nil || e.OnTimeout != nil || e.OnLateResult != nil || e.OnLateError != nil
}

// Pointers is one JSON pointer, or a list of them, in the file.
type Pointers []string

// UnmarshalYAML implements yaml.Unmarshaler: a string, or a list of strings.
func (p *Pointers) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*p = Pointers{n.Value}
		return nil
	}
	var list []string
	if err := n.Decode(&list); err != nil {
		return fmt.Errorf("line %d: a JSON pointer or a list of them: %w", n.Line, err)
	}
	*p = list
	return nil
}

// Programs lists the programs of the exec hooks, each as a Problem whose
// Path is its exec setting and whose Msg is the program.
func (p *Policy) Programs(prefix string) []*Problem {
	out := p.Defaults.programs(prefix + ".defaults")
	for j := range p.Rules {
		out = append(out, p.Rules[j].programs(fmt.Sprintf("%s.rules[%d]", prefix, j))...)
	}
	return out
}

func (r *Rule) programs(at string) []*Problem {
	var out []*Problem
	for _, h := range []struct {
		key  string
		hook *Hook
	}{{"on_cancel", r.OnCancel}, {"on_timeout", r.OnTimeout}, {"on_late_result", r.OnLateResult}, {"on_late_error", r.OnLateError}} {
		if h.hook != nil && len(h.hook.Exec) > 0 && h.hook.Exec[0] != "" {
			out = append(out, &Problem{Path: at + "." + h.key + ".exec", Msg: h.hook.Exec[0]})
		}
	}
	return out
}

// Warnings reports rules that are valid but can never apply (shadowed by
// an earlier rule, or naming only what rules never see). Each is a
// *Problem. Shadowing is found in time near-linear in the rules: literal
// names by lookup, and wildcard rules compared at most shadowBudget times
// in all.
func (p *Policy) Warnings(prefix string) []*Problem {
	var out []*Problem
	sh := shadows{first: map[shadowKey]int{}, methodOverTools: -1, budget: shadowBudget}
	for j := range p.Rules {
		r, at := &p.Rules[j], fmt.Sprintf("%s.rules[%d]", prefix, j)
		g, _ := compileGlob(cmp.Or(r.Tool, r.Method))
		if g == nil {
			continue // invalid: Validate says so
		}
		if r.Method != "" && g.literal && strings.HasPrefix(r.Method, "notifications/") {
			out = append(out, &Problem{Path: at + ".method", Msg: "never matches: rules apply to requests, and " + r.Method + " is a notification"})
		}
		if i, ok := sh.shadowing(g, r.Tool != ""); ok {
			e := &p.Rules[i]
			key := map[bool]string{true: "tool", false: "method"}[e.Tool != ""]
			out = append(out, &Problem{Path: at, Msg: fmt.Sprintf("never applies: rules[%d] (%s %q) matches every request it would, and comes first",
				i, key, cut(cmp.Or(e.Tool, e.Method), 100))})
		}
		sh.add(j, g, r.Tool != "")
	}
	if sh.budget < 0 {
		out = append(out, &Problem{Path: prefix + ".rules", Msg: fmt.Sprintf("too many wildcard rules to check them all for shadowing: %d comparisons made", shadowBudget)})
	}
	return append(out, p.layerWarnings(prefix)...)
}

// shadowBudget bounds the comparisons of wildcard rules Warnings makes.
const shadowBudget = 1_000_000

// shadowKey is a literal rule's kind and name.
type shadowKey struct {
	tool bool
	name string
}

// shadows is what Warnings knows of the rules seen so far.
type shadows struct {
	first           map[shadowKey]int // the first literal rule of each kind and name
	wild            []shadowGlob      // the wildcard rules, in order
	methodOverTools int               // the first method rule that matches tools/call, or -1
	budget          int               // comparisons left; below zero, no more are made
}

type shadowGlob struct {
	at   int
	g    *glob
	tool bool
}

// shadowing returns the first rule seen that covers a rule of glob g (a
// tool rule if tool is set).
func (s *shadows) shadowing(g *glob, tool bool) (int, bool) {
	best := -1
	if i, ok := s.first[shadowKey{tool, g.text}]; ok && g.literal {
		best = i
	}
	if tool && s.methodOverTools >= 0 && (best < 0 || s.methodOverTools < best) {
		best = s.methodOverTools
	}
	for _, w := range s.wild {
		if best >= 0 && w.at > best {
			break
		}
		if s.budget--; s.budget < 0 {
			break
		}
		if w.tool == tool && w.g.covers(g) {
			best = w.at
			break
		}
	}
	return best, best >= 0
}

// add notes rule at, of glob g.
func (s *shadows) add(at int, g *glob, tool bool) {
	switch {
	case g.literal:
		if _, ok := s.first[shadowKey{tool, g.text}]; !ok {
			s.first[shadowKey{tool, g.text}] = at
		}
	default:
		s.wild = append(s.wild, shadowGlob{at, g, tool})
	}
	if !tool && s.methodOverTools < 0 && g.match("tools/call") {
		s.methodOverTools = at
	}
}

// cut returns s, or its first n bytes and how long it was, for a message.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:n], len(s))
}

// Defaults of a reissue: join rule.
const (
	DefaultReissueWindow = 5 * time.Minute
	DefaultReissueGrace  = 30 * time.Second
)

// validateReissue checks a rule's reissue settings.
func (r *Rule) validateReissue(at string, bad func(at, format string, a ...any)) {
	switch {
	case r.Reissue != "" && r.Reissue != "join":
		bad(at+".reissue", "%q is not join (or empty)", r.Reissue)
	case r.Reissue == "" && (r.ReissueKey != "" || r.ReissueWindow != nil || r.ReissueGrace != nil):
		bad(at+".reissue", "reissue_key, reissue_window and reissue_grace need reissue: join")
	case r.Reissue == "join" && r.Tool == "":
		bad(at+".reissue", "reissue: join is for tools/call rules (tool:), not method:")
	}
	for key, d := range map[string]*time.Duration{"reissue_window": r.ReissueWindow, "reissue_grace": r.ReissueGrace} {
		if d != nil && *d <= 0 {
			bad(at+"."+key, "must be positive, got %v", *d)
		}
	}
	if r.ReissueKey != "" {
		if _, err := parsePointer(r.ReissueKey); err != nil {
			bad(at+".reissue_key", "%v", err)
		}
	}
}

// Defaults of a task: host rule.
const (
	DefaultTaskTTL  = time.Hour
	DefaultTaskPoll = time.Second
)

// validateTask checks a rule's task settings.
func (r *Rule) validateTask(at string, bad func(at, format string, a ...any)) {
	switch {
	case r.Task != "" && r.Task != "host":
		bad(at+".task", "%q is not host (or empty)", r.Task)
	case r.Task == "" && (r.TaskTTL != nil || r.TaskPollInterval != nil || r.TaskAfter != nil):
		bad(at+".task", "task_ttl, task_poll_interval and task_after need task: host")
	case r.Task == "host" && r.Tool == "":
		bad(at+".task", "task: host is for tools/call rules (tool:), not method:")
	case r.Task == "host" && r.Reissue != "":
		bad(at+".task", "task: host and reissue: join do not go together: a hosted task is already one call the client can come back to")
	}
	for key, d := range map[string]*time.Duration{"task_ttl": r.TaskTTL, "task_poll_interval": r.TaskPollInterval} {
		if d != nil && *d <= 0 {
			bad(at+"."+key, "must be positive, got %v", *d)
		}
	}
	if r.TaskAfter != nil && *r.TaskAfter < 0 {
		bad(at+".task_after", "must not be negative, got %v", *r.TaskAfter)
	}
}

// orDefault is *p, or def when a setting p was not given.
func orDefault[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

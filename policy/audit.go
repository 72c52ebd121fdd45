package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// Audit configures the audit trail.
type Audit struct {
	// Path is the file the trail is appended to, "stderr", or "off".
	// Default stderr.
	Path string `yaml:"path"`
	// IncludeArguments writes each request's arguments into its line.
	// Default false: arguments may hold secrets.
	IncludeArguments bool `yaml:"include_arguments"`
	// IncludeResults writes late results into the line. Default false.
	IncludeResults bool `yaml:"include_results"`
	// IncludeHookOutput writes what a hook printed (or a webhook answered)
	// into the line. Default false: it may echo secrets.
	IncludeHookOutput bool `yaml:"include_hook_output"`
	// NATSSubject, with a fleet (cluster.nats), publishes each line to this
	// subject too, so that a fleet has one audit feed.
	NATSSubject string `yaml:"nats_subject"`
}

// Statuses of an audit line, in plain words.
const (
	StatusNotDispatched   = "cancelled before dispatch"
	StatusNotConfirmed    = "upstream notified; stop not confirmed"
	StatusCompletedBefore = "completed before the cancel arrived"
	StatusAnsweredLate    = "upstream notified; answered after the cancel (suppressed)"
	StatusCompensated     = "late result compensated"
	StatusHookRan         = "upstream notified; compensating hook ran"
	StatusOrphan          = "compensation failed: orphan"
	// StatusCompensationPending: the proxy stopped before a hook succeeded;
	// the hook store keeps it, and the next start resumes it.
	StatusCompensationPending = "compensation pending: resumes when the proxy starts again"
	// StatusResumedOK: a hook resumed after a restart succeeded (a line of
	// its own: the request's was written before).
	StatusResumedOK = "compensating hook ran after a restart"
	// StatusQueued: the hooks went to the fleet's work queue (cluster.nats);
	// the replica that runs each writes a line of its own.
	StatusQueued = "compensation queued to the fleet"
	// StatusFleetOK: a hook taken from the fleet's work queue succeeded.
	StatusFleetOK       = "compensating hook ran (fleet)"
	StatusTaskCancelled = "task cancelled"
	StatusTaskNotCancel = "task cancel not confirmed"
)

// Record is one line of the audit trail: the whole story of one request
// that was cancelled, timed out or compensated.
type Record struct {
	Time      time.Time       `json:"time"`
	Session   string          `json:"session,omitempty"`
	Direction string          `json:"direction"`
	ID        json.RawMessage `json:"id"`
	// Correlation holds the values the rule's correlate read from the
	// request: the client's own run or job id, apart from the MCP request
	// id (ID, in Session) and the provider's job id (Captured).
	Correlation map[string]json.RawMessage `json:"correlation,omitempty"`
	Method      string                     `json:"method"`
	Tool        string                     `json:"tool,omitempty"`
	Rule        string                     `json:"rule,omitempty"`
	Source      string                     `json:"source,omitempty"` // client, deadline, client_timeout, disconnect, session_end, shutdown
	Reason      string                     `json:"reason,omitempty"`
	Started     time.Time                  `json:"started"`
	Cancelled   *time.Time                 `json:"cancelled,omitempty"`
	Dispatched  bool                       `json:"dispatched"`
	Notified    bool                       `json:"upstream_notified"`
	Late        *Late                      `json:"late_response,omitempty"`
	TaskID      string                     `json:"task_id,omitempty"`
	TaskCancel  string                     `json:"task_cancel,omitempty"`
	Captured    map[string]json.RawMessage `json:"captured,omitempty"`
	Hooks       []HookResult               `json:"hooks,omitempty"`
	Arguments   json.RawMessage            `json:"arguments,omitempty"`
	Restarted   bool                       `json:"server_restarted,omitempty"`
	// Resumed marks the line of a hook resumed after a restart.
	Resumed bool `json:"resumed,omitempty"`
	// TraceID is the trace the request's span is in, when traced: from the
	// audit line to the trace.
	TraceID string `json:"trace_id,omitempty"`
	// JoinedID is, for a re-issue that joined a running call (reissue:
	// join), that call's request id.
	JoinedID json.RawMessage `json:"joined_id,omitempty"`
	Status   string          `json:"status"`
}

// statusSettled reports whether a status says the request's work is
// over, stopped or compensated; the others (not confirmed, orphaned,
// pending) mark its span an error, the status its description.
func statusSettled(status string) bool {
	switch status {
	case StatusNotConfirmed, StatusOrphan, StatusCompensationPending, StatusTaskNotCancel:
		return false
	}
	return true
}

// spanAttrs are what a request's span learns from its audit line: the
// outcome and the ids kept apart, the client's run ids (correlation) and
// the provider's job ids (captured), beside the MCP request id the span
// has from the start.
func (rec *Record) spanAttrs() []proxy.Attr {
	attrs := []proxy.Attr{proxy.String(proxy.AttrOutcome, rec.Status)}
	if rec.Rule != "" {
		attrs = append(attrs, proxy.String("mcp_cancel_proxy.rule", rec.Rule))
	}
	if rec.Source != "" {
		attrs = append(attrs, proxy.String(proxy.AttrSource, rec.Source))
	}
	for name, v := range rec.Correlation {
		attrs = append(attrs, proxy.String("mcp_cancel_proxy.correlation."+name, plain(v)))
	}
	for name, v := range rec.Captured {
		attrs = append(attrs, proxy.String("mcp_cancel_proxy.captured."+name, plain(v)))
	}
	if rec.TaskID != "" {
		attrs = append(attrs, proxy.String("mcp_cancel_proxy.task.id", rec.TaskID))
	}
	return attrs
}

// The outcomes of a forwarded cancel (Record.Honour), as the metric
// mcp_cancel_proxy_cancels_settled_total{honoured} and the status page
// count them.
const (
	// HonourSeen: the stop was seen: the server answered the cancelled
	// request with an error (its answer to the cancel), or was restarted.
	HonourSeen = "true"
	// HonourIgnored: the server answered with a result anyway: its work ran
	// to its end.
	HonourIgnored = "false"
	// HonourForwarded: nothing after the cancel showed whether the server
	// stopped (it went quiet: a server that ignores the cancel and never
	// answers looks the same).
	HonourForwarded = "forwarded"
)

// Honour says what rec, a forwarded cancel's story, showed of the
// server's stop. Before, a server that went quiet after the cancel was
// counted as honouring it, though its tool kept working
// (server-everything's).
func (rec *Record) Honour() string {
	switch {
	case rec.Restarted || rec.Late != nil && (rec.Late.Error || rec.Late.Stopped):
		return HonourSeen
	case rec.Late != nil:
		return HonourIgnored
	}
	return HonourForwarded
}

// Late is a response that came after the cancel and was kept from the client.
type Late struct {
	At    time.Time `json:"at"`
	Error bool      `json:"error"`
	// Stopped says the answer shows the handler stopped: a JSON-RPC error
	// or a result marked isError (the go-sdk's answer to a cancel), not a
	// result of work that ran to its end.
	Stopped    bool            `json:"stopped,omitempty"`
	Suppressed bool            `json:"suppressed"`
	Result     json.RawMessage `json:"result,omitempty"` // with include_results
}

// auditWriter appends records as JSON lines, each whole or not at all.
type auditWriter struct {
	mu   sync.Mutex
	w    io.Writer
	c    io.Closer
	file *os.File // when the trail is a file: a line cut short is cut off
	// failures counts lines not written; lastLog is when one was last
	// logged (the first always is, then one a minute).
	failures int
	lastLog  time.Time
}

// openAudit opens the trail the configuration names; nil when off.
func openAudit(a Audit) (*auditWriter, error) {
	switch a.Path {
	case "off":
		return nil, nil
	case "", "stderr":
		return &auditWriter{w: os.Stderr}, nil
	}
	f, err := os.OpenFile(a.Path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o640)
	if err != nil {
		return nil, fmt.Errorf("audit trail: %w", err)
	}
	return &auditWriter{w: f, c: f, file: f}, nil
}

// write appends r's line. A write cut short (a full disk) is taken back,
// so that the trail never holds half a line.
func (a *auditWriter) write(r *Record) error {
	if a == nil {
		return nil
	}
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var end int64 = -1
	if a.file != nil {
		if st, err := a.file.Stat(); err == nil {
			end = st.Size()
		}
	}
	n, err := a.w.Write(append(line, '\n'))
	if err != nil && n > 0 && end >= 0 {
		if terr := a.file.Truncate(end); terr != nil {
			err = errors.Join(err, fmt.Errorf("taking back the part written: %w", terr))
		}
	}
	return err
}

// failed counts a line not written, and reports whether to log it: the
// first failure, then at most one a minute, with the count so far.
func (a *auditWriter) failed(now time.Time) (log bool, count int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.failures++
	if a.failures == 1 || now.Sub(a.lastLog) >= time.Minute {
		a.lastLog = now
		return true, a.failures
	}
	return false, a.failures
}

func (a *auditWriter) close() error {
	if a == nil || a.c == nil {
		return nil
	}
	return a.c.Close()
}

// HookEvent is the JSON document a hook receives, on stdin or as the POST
// body.
type HookEvent struct {
	Event          string                     `json:"event"` // cancel, timeout, late_result, late_error
	Time           time.Time                  `json:"time"`
	Started        time.Time                  `json:"started"`         // when the request started
	IdempotencyKey string                     `json:"idempotency_key"` // the same for every attempt
	Attempt        int                        `json:"attempt"`
	Session        string                     `json:"session,omitempty"`
	Direction      string                     `json:"direction"`
	RequestID      json.RawMessage            `json:"request_id"`
	Correlation    map[string]json.RawMessage `json:"correlation,omitempty"`
	Method         string                     `json:"method"`
	Tool           string                     `json:"tool,omitempty"`
	Arguments      json.RawMessage            `json:"arguments,omitempty"`
	Captured       map[string]json.RawMessage `json:"captured,omitempty"`
	Source         string                     `json:"source,omitempty"`
	Reason         string                     `json:"reason,omitempty"`
	Dispatched     bool                       `json:"dispatched"`
	Result         json.RawMessage            `json:"result,omitempty"`
	Error          json.RawMessage            `json:"error,omitempty"`

	span  proxy.Span         // the request's span, when traced: each attempt is a child
	trace proxy.TraceContext // the attempt's span, passed on to the hook
}

func (ev *HookEvent) marshal() ([]byte, error) { return json.Marshal(ev) }

// env returns the MCP_CANCEL_* variables an exec hook gets: the event's
// main fields, each captured value as MCP_CANCEL_CAPTURE_<NAME>, and each
// correlated one as MCP_CANCEL_CORRELATE_<NAME>.
func (ev *HookEvent) env() []string {
	vars := []string{
		"MCP_CANCEL_EVENT=" + envSafe(ev.Event),
		"MCP_CANCEL_IDEMPOTENCY_KEY=" + envSafe(ev.IdempotencyKey),
		"MCP_CANCEL_ATTEMPT=" + strconv.Itoa(ev.Attempt),
		"MCP_CANCEL_SESSION=" + envSafe(ev.Session),
		"MCP_CANCEL_REQUEST_ID=" + plain(ev.RequestID),
		"MCP_CANCEL_METHOD=" + envSafe(ev.Method),
		"MCP_CANCEL_TOOL=" + envSafe(ev.Tool),
		"MCP_CANCEL_SOURCE=" + envSafe(ev.Source),
	}
	if ev.trace.Parent != "" { // the environment carrier of W3C trace context
		vars = append(vars, "TRACEPARENT="+ev.trace.Parent, "TRACESTATE="+ev.trace.State)
	}
	for name, v := range ev.Captured {
		vars = append(vars, "MCP_CANCEL_CAPTURE_"+envName(name)+"="+plain(v))
	}
	for name, v := range ev.Correlation {
		vars = append(vars, "MCP_CANCEL_CORRELATE_"+envName(name)+"="+plain(v))
	}
	return vars
}

// plain renders a JSON value for an environment variable: a string without
// its quotes, anything else as JSON.
func plain(v json.RawMessage) string {
	var s string
	if json.Unmarshal(v, &s) == nil {
		return envSafe(s)
	}
	var b bytes.Buffer
	if json.Compact(&b, v) == nil { // no newline between a value's tokens either
		return b.String()
	}
	return envSafe(string(v))
}

// envSafe returns s as it is, or, when it holds a control character (NUL,
// which no environment variable can hold; CR or LF, which would forge a
// second line in a hook's `env` output; any other), JSON-encoded with its
// quotes: a hook then still runs, and the event on its stdin has the exact
// value. Clients choose ids and tool names, and servers captured values.
func envSafe(s string) string {
	if !strings.ContainsFunc(s, unicode.IsControl) && !strings.ContainsAny(s, "\u2028\u2029") {
		return s
	}
	b, _ := json.Marshal(s)
	return string(b)
}

// envName turns a capture name into an environment variable's: upper case,
// anything but letters and digits as _.
func envName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, s)
}

// idempotencyKey names one event of one request, the same on every retry.
func idempotencyKey(session string, id []byte, started time.Time, event string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00%s", session, id, started.UnixNano(), event)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

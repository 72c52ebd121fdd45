// Package transcript holds the golden transcripts that state the proxy's
// frame rules as exchanges, and reads them for the tests of every
// transport that replays them.
//
// Each transcript (testdata/*.txtar) has a comment saying what it shows,
// and a file "steps" with one step a line:
//
//	c> FRAME   the client sends FRAME
//	c~ FRAME   the client sends FRAME, a request the proxy holds (its
//	           rule's max_concurrent): over HTTP its POST is answered
//	           only once it is dispatched or withdrawn, so the steps go on
//	s> FRAME   the server sends FRAME
//	s< FRAME   the server receives FRAME (compared as JSON)
//	c< FRAME   the client receives FRAME
//	sync       every frame sent so far has been decided, and nothing
//	           else has reached either peer
//	stats K=N  the session's counters, as many as named (forwarded,
//	           cancels_forwarded, cancels_dropped, withdrawn,
//	           responses_suppressed, progress_suppressed, dropped,
//	           proxy_errors, joined, silenced)
//	clock +D   the fake clock every transport runs on moves by D (a Go
//	           duration): deadlines and graces that end within it end
//	era REV    the session speaks protocol revision REV; first if at all
//	           (without it, 2025-06-18 over HTTP). In 2026-07-28 there is
//	           no initialize and no session: each request stands alone
//	close ID   the client leaves the response stream of the POST that
//	           carried request ID (Streamable HTTP clients only): in
//	           2026-07-28 that is the request's cancel. A Streamable HTTP
//	           server that sees a stream of 2026-07-28 closed under a
//	           request receives it as that request's notifications/cancelled,
//	           with the reason "(its stream closed)"
//	cut ID     the server's side of the connection that would carry the
//	           answer to request ID breaks: a stdio server exits, an
//	           HTTP+SSE server's event stream breaks, a Streamable HTTP
//	           server's response stream for ID breaks before its end
//	end ID     the server ends, cleanly, what was to carry the answer to
//	           request ID without answering it: a stdio server exits, an
//	           HTTP+SSE server ends its event stream, a Streamable HTTP
//	           server ends ID's response stream
//	trace ID T the span of the client's request ID is in trace T (32 hex
//	           digits): with a file "traceparent", over HTTP, the POST's
//	           traceparent header continued
//	auth V     the client's POSTs carry the Authorization header V from
//	           now on (Streamable HTTP clients only): who a request
//	           without a session is from
//	shutdown   the proxy shuts down, as on SIGTERM once the shutdown
//	           grace is over: what is still in flight is cancelled on the
//	           server and answered to its client; the steps after it see
//	           what the shutdown sent, but nothing more is played
//
// A file "policy", if present, is the policy the session runs under, as
// the configuration file's policy block holds it (YAML, without the
// "policy:" key); without it there is none.
//
// A file "max-frame-size", if present, holds the largest message, in
// bytes, that every transport of the session takes (limits.max_frame_size).
//
// A file "disconnect-cancel-after", if present, holds the HTTP fronts'
// disconnect grace (http.disconnect_cancel_after, a Go duration): in the
// 2025 revisions a request whose stream the client left ("close") is
// cancelled once it passes; the replay waits for the grace's timer to be
// set before it goes on.
//
// Steps that begin with the client's initialize have no harness's
// initialize before them (Initializes): the session is the steps' own.
//
// A file "traceparent", if present, holds the W3C trace context every POST
// of an HTTP client carries as its traceparent header; the proxy traces
// (a recording tracer) and the steps say, with trace, which trace each
// request's span is in. A Streamable HTTP server that gets a traceparent
// header receives it as the request's params._meta.traceparent, where a
// stdio server would find it.
//
// A file "server-capabilities", if present, holds the capabilities (a
// JSON object) the server declares in its answer to the harness's own
// initialize (Initialize), which every transport plays before the steps,
// out of their sight (over stdio only when the file is present); without
// it the server declares none.
//
// A file "not-on", if present, names (one a line) the transports the
// transcript does not hold on, as the HTTP replay names them
// ("streamable-to-streamable"); its comment says why.
//
// Blank lines and lines starting with # are skipped. Over stdio, frames
// reach each peer in the order of the steps; over HTTP a peer may receive
// what several requests carry in another order, and the replay says so.
package transcript

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/tools/txtar"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
)

//go:embed testdata/*.txtar
var files embed.FS

// Step is one line of a transcript.
type Step struct {
	Op   string // c>, c~, s>, c<, s<, sync, stats, clock, era, close, cut, end, auth or shutdown
	Arg  string
	Line int // in the steps file, from 1
}

// Transcript is one golden exchange.
type Transcript struct {
	Name    string // the file's name without .txtar
	Comment string
	Steps   []Step
	NotOn   []string // the transports it does not hold on
	Policy  string   // the policy file's YAML, if any
	// MaxFrameSize is the max-frame-size file's, or zero for the default.
	MaxFrameSize int
	// DisconnectCancelAfter is the disconnect-cancel-after file's, or zero.
	DisconnectCancelAfter time.Duration
	// ServerCapabilities is the server-capabilities file's JSON object, or
	// "{}".
	ServerCapabilities string
	// TraceParent is the traceparent file's W3C trace context, which
	// every POST of the client carries as its traceparent header, if any.
	TraceParent string
}

// Initialize is the harness's initialize of a transcript's session, out of
// the steps' sight, and InitializeAnswer the server's answer to it, with
// the transcript's server capabilities.
const Initialize = `{"jsonrpc":"2.0","id":"harness-init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"replay","version":"1"}}}`

// InitializeAnswer is the server's answer to Initialize.
func (tr *Transcript) InitializeAnswer() string {
	return `{"jsonrpc":"2.0","id":"harness-init","result":{"protocolVersion":"2025-06-18","capabilities":` +
		tr.ServerCapabilities + `,"serverInfo":{"name":"replay","version":"1"}}}`
}

// ClientInitializeAnswer is the answer to Initialize the client gets: the
// server's, whose capabilities, under a policy that hosts tasks (task:
// host), also declare tasks.
func (tr *Transcript) ClientInitializeAnswer() string {
	if !tr.hostsTasks() {
		return tr.InitializeAnswer()
	}
	var caps map[string]any
	json.Unmarshal([]byte(tr.ServerCapabilities), &caps)
	if caps == nil {
		caps = map[string]any{}
	}
	tasks, _ := caps["tasks"].(map[string]any)
	if tasks == nil {
		tasks = map[string]any{}
	}
	for _, k := range []string{"list", "cancel"} {
		if tasks[k] == nil {
			tasks[k] = map[string]any{}
		}
	}
	if tasks["requests"] == nil {
		tasks["requests"] = map[string]any{"tools": map[string]any{"call": map[string]any{}}}
	}
	caps["tasks"] = tasks
	b, _ := json.Marshal(caps)
	return `{"jsonrpc":"2.0","id":"harness-init","result":{"protocolVersion":"2025-06-18","capabilities":` +
		string(b) + `,"serverInfo":{"name":"replay","version":"1"}}}`
}

// Initializes reports whether the steps begin with the client's
// initialize: then no harness plays one of its own before them.
func (tr *Transcript) Initializes() bool {
	if len(tr.Steps) == 0 || tr.Steps[0].Op != "c>" {
		return false
	}
	var f framing.Frame
	return f.Parse([]byte(tr.Steps[0].Arg)) == nil && !f.Batch && f.Msgs[0].Method == framing.MethodInitialize
}

// policy parses the transcript's policy, as a configuration file's.
func (tr *Transcript) policy() (config.Config, error) {
	var indented strings.Builder
	for line := range strings.Lines(tr.Policy) {
		indented.WriteString("  " + line)
	}
	return config.Parse(tr.Name+"/policy", strings.NewReader("policy:\n"+indented.String()))
}

// hostsTasks reports whether a rule of the transcript's policy hosts tasks.
func (tr *Transcript) hostsTasks() bool {
	cfg, err := tr.policy()
	return err == nil && tr.Policy != "" && slices.ContainsFunc(cfg.Policy.Rules, func(r policy.Rule) bool { return r.Task == "host" })
}

// Engine returns the policy engine a transport runs the transcript's
// session under, on clk, or nil when the transcript has no policy; the
// test shuts it down.
func (tr *Transcript) Engine(clk clock.Clock) (*policy.Engine, error) {
	if tr.Policy == "" {
		return nil, nil
	}
	cfg, err := tr.policy()
	if err != nil {
		return nil, err
	}
	var tasks atomic.Int64 // hosted tasks' ids count, for steps that name them
	return policy.New(policy.Options{Policy: cfg.Policy, Audit: policy.Audit{Path: "off"}, Clock: clk,
		TaskIDs: func() string { return fmt.Sprintf("task-%d", tasks.Add(1)) }})
}

// Era returns the protocol revision the transcript's session speaks, or
// "" for the transport's default.
func (tr *Transcript) Era() string {
	if len(tr.Steps) > 0 && tr.Steps[0].Op == "era" {
		return tr.Steps[0].Arg
	}
	return ""
}

// Moved returns how far a "clock" step moves the clock.
func (st Step) Moved() (time.Duration, error) {
	return time.ParseDuration(strings.TrimPrefix(st.Arg, "+"))
}

// Applies reports whether the transcript holds on the transport named.
func (tr *Transcript) Applies(transport string) bool { return !slices.Contains(tr.NotOn, transport) }

// ForEach runs f as a subtest, transport/NAME, for every transcript that
// holds on the transport named (the others are skipped, as their not-on
// file says).
func ForEach(t *testing.T, transport string, f func(t *testing.T, tr *Transcript)) {
	t.Helper()
	all, err := All()
	if err != nil {
		t.Fatal(err)
	}
	for i := range all {
		tr := &all[i]
		t.Run(transport+"/"+tr.Name, func(t *testing.T) {
			t.Parallel() // a replay shares nothing with another: its own clock, servers and sockets
			if !tr.Applies(transport) {
				t.Skip("does not hold on this transport: see the transcript's comment")
			}
			f(t, tr)
		})
	}
}

// All returns every transcript, in the order of their names, and then
// the strict-client soak (Soak).
func All() ([]Transcript, error) {
	names, err := files.ReadDir("testdata")
	if err != nil {
		return nil, err
	}
	var all []Transcript
	for _, n := range names {
		data, err := files.ReadFile(path.Join("testdata", n.Name()))
		if err != nil {
			return nil, err
		}
		tr, err := parse(strings.TrimSuffix(n.Name(), ".txtar"), txtar.Parse(data))
		if err != nil {
			return nil, err
		}
		all = append(all, tr)
	}
	return append(all, Soak(SoakCalls)), nil
}

func parse(name string, a *txtar.Archive) (Transcript, error) {
	tr := Transcript{Name: name, Comment: string(a.Comment), ServerCapabilities: "{}"}
	for _, f := range a.Files {
		var err error
		switch f.Name {
		case "not-on":
			tr.NotOn = strings.Fields(string(f.Data))
		case "policy":
			tr.Policy = string(f.Data)
		case "disconnect-cancel-after":
			tr.DisconnectCancelAfter, err = time.ParseDuration(strings.TrimSpace(string(f.Data)))
			if err == nil && tr.DisconnectCancelAfter <= 0 {
				err = errors.New("not positive")
			}
		case "max-frame-size":
			tr.MaxFrameSize, err = strconv.Atoi(strings.TrimSpace(string(f.Data)))
			if err == nil && tr.MaxFrameSize <= 0 {
				err = errors.New("not positive")
			}
		case "traceparent":
			tr.TraceParent = strings.TrimSpace(string(f.Data))
			if parts := strings.Split(tr.TraceParent, "-"); len(parts) != 4 || len(parts[1]) != 32 {
				err = errors.New("not a W3C traceparent (00-TRACEID-SPANID-FLAGS)")
			}
		case "server-capabilities":
			var caps map[string]json.RawMessage
			if err = json.Unmarshal(f.Data, &caps); err == nil {
				tr.ServerCapabilities = strings.TrimSpace(string(f.Data))
			}
		case "steps":
			tr.Steps, err = parseSteps(name, string(f.Data))
			if err != nil {
				return tr, err
			}
		}
		if err != nil {
			return tr, fmt.Errorf("%s: %s: %v", name, f.Name, err)
		}
	}
	if len(tr.Steps) == 0 {
		return tr, fmt.Errorf("%s: no steps", name)
	}
	return tr, nil
}

// parseSteps reads a transcript's steps file.
func parseSteps(name, data string) ([]Step, error) {
	var steps []Step
	for n, line := range strings.Split(data, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		op, arg, _ := strings.Cut(line, " ")
		switch op {
		case "c>", "c~", "s>", "c<", "s<", "sync", "stats", "clock", "era", "close", "cut", "end", "shutdown", "trace", "auth":
		default:
			return nil, fmt.Errorf("%s, steps line %d: unknown step %q", name, n+1, op)
		}
		st := Step{Op: op, Arg: arg, Line: n + 1}
		if op == "era" && len(steps) > 0 {
			return nil, fmt.Errorf("%s, steps line %d: era must be the first step", name, n+1)
		}
		if f := strings.Fields(arg); op == "trace" && (len(f) != 2 || len(f[1]) != 32) {
			return nil, fmt.Errorf("%s, steps line %d: trace wants a request id and a trace id of 32 hex digits", name, n+1)
		}
		if _, err := st.Moved(); op == "clock" && err != nil {
			return nil, fmt.Errorf("%s, steps line %d: %v", name, n+1, err)
		}
		steps = append(steps, st)
	}
	return steps, nil
}

// CheckStats compares the counters named in arg ("forwarded=3 ...") with
// st.
func CheckStats(st proxy.Stats, arg string) error {
	have := map[string]int64{"forwarded": st.Forwarded, "cancels_forwarded": st.CancelsForwarded,
		"cancels_dropped": st.CancelsDropped, "withdrawn": st.Withdrawn, "responses_suppressed": st.ResponsesSuppressed,
		"progress_suppressed": st.ProgressSuppressed, "dropped": st.Dropped, "proxy_errors": st.ProxyErrors, "joined": st.Joined, "silenced": st.Silenced}
	for _, kv := range strings.Fields(arg) {
		k, v, _ := strings.Cut(kv, "=")
		want, err := strconv.ParseInt(v, 10, 64)
		got, known := have[k]
		if err != nil || !known {
			return fmt.Errorf("bad counter %q", kv)
		}
		if got != want {
			return fmt.Errorf("%s = %d, want %d (all: %+v)", k, got, want, st)
		}
	}
	return nil
}

// SameJSON reports whether got and want are the same JSON value, where a
// string "*" in want stands for any value at all (an error's message, which
// says what broke in each transport's words).
func SameJSON(got []byte, want string) bool {
	var g, w any
	return json.Unmarshal(got, &g) == nil && json.Unmarshal([]byte(want), &w) == nil && matches(g, w)
}

func matches(g, w any) bool {
	if w == "*" {
		return true
	}
	switch w := w.(type) {
	case map[string]any:
		gm, ok := g.(map[string]any)
		if !ok || len(gm) != len(w) {
			return false
		}
		for k, wv := range w {
			gv, ok := gm[k]
			if !ok || !matches(gv, wv) {
				return false
			}
		}
		return true
	case []any:
		ga, ok := g.([]any)
		if !ok || len(ga) != len(w) {
			return false
		}
		for i := range w {
			if !matches(ga[i], w[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(g, w)
}

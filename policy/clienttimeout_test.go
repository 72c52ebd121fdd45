package policy

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// initialize is a client's initialize, naming the client.
func initialize(name, version string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":%q,"version":%q}}}`, name, version)
}

// wantClientTimeout checks that the next action ends c at its client's
// timeout of budget: the cancel for the server, and the error for the
// client, whose data says why.
func wantClientTimeout(t *testing.T, ft *fakeTransport, id int, budget string) {
	t.Helper()
	a := ft.next()
	if a.kind != "expire" || a.call.ID() != framing.IntID(int64(id)) || a.source != proxy.SourceClientTimeout {
		t.Fatalf("action %s of %v from %q, want a client timeout of %d", a.kind, a.call.ID(), a.source, id)
	}
	if !strings.Contains(string(a.cancel), fmt.Sprintf(`"requestId":%d`, id)) || !strings.Contains(a.reason, "client_timeout") {
		t.Errorf("cancel for the server: %s (reason %q)", a.cancel, a.reason)
	}
	var reply struct {
		Error struct {
			Code int               `json:"code"`
			Data map[string]string `json:"data"`
		} `json:"error"`
	}
	json.Unmarshal(a.reply, &reply)
	if reply.Error.Code != proxy.CodeDeadline || reply.Error.Data["reason"] != "client_timeout" || reply.Error.Data["timeout"] != budget {
		t.Errorf("reply to the client: %s", a.reply)
	}
}

// TestClientTimeout: a call of a rule with a fixed client_timeout is
// ended when it passes, not before, and its audit line says so; a call
// answered in time, initialize, and a call of another tool are not.
func TestClientTimeout(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Defaults.ClientTimeout = &ClientTimeout{Wait: time.Hour} // initialize is never timed
	p.Rules = []Rule{{Tool: "report", ClientTimeout: &ClientTimeout{Wait: 5 * time.Minute}}, {Tool: "other", ClientTimeout: &ClientTimeout{}}}
	e, clk, recs := engine(t, p)
	ft := newTransport(t, e)
	ft.client(initialize("t", "1"))
	ft.client(call(1, "report", ""))
	ft.client(call(2, "report", ""))
	ft.client(call(3, "other", ""))
	clk.Advance(time.Minute)
	ft.server(result(2, `{"content":[]}`))
	clk.Advance(4*time.Minute - time.Nanosecond)
	ft.none()
	clk.Advance(time.Nanosecond)
	wantClientTimeout(t, ft, 1, "5m0s")
	if o := ft.server(result(1, `{"content":[]}`)); o.Verdict != proxy.Suppress {
		t.Errorf("late result: verdict %v, want suppressed", o.Verdict)
	}
	r := waitRecord(t, recs)
	if r.Source != "client_timeout" || r.Late == nil || r.Tool != "report" || !strings.Contains(r.Reason, "client_timeout") {
		t.Errorf("audit: %+v", r)
	}
	clk.Advance(10 * time.Hour)
	ft.none()
}

// TestClientTimeoutAuto: with auto, the budget is the client's own wait
// from the table and the grace: Codex's 5m and 30s; a client the table
// knows to cancel, and one it does not know, are never timed.
func TestClientTimeoutAuto(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Defaults.ClientTimeout = &ClientTimeout{Auto: true}
	e, clk, _ := engine(t, p)
	codex, claude, unknown := transportOf(t, e, "codex", nil), transportOf(t, e, "claude", nil), transportOf(t, e, "x", nil)
	codex.client(initialize("codex-mcp-client", "0.150.0"))
	claude.client(initialize("claude-code", "2.1.0"))
	unknown.client(initialize("my-agent", "1"))
	for _, ft := range []*fakeTransport{codex, claude, unknown} {
		ft.client(call(1, "report", ""))
	}
	clk.Advance(5*time.Minute + 30*time.Second - time.Nanosecond)
	codex.none()
	clk.Advance(time.Nanosecond)
	wantClientTimeout(t, codex, 1, "5m30s")
	clk.Advance(10 * time.Hour)
	claude.none()
	unknown.none()
}

// TestClientTimeoutAutoStopsOnceTheClientCancels: a client that sends a
// cancel shows it cancels: auto no longer times its calls, in flight or
// to come. A fixed client_timeout still holds.
func TestClientTimeoutAutoStopsOnceTheClientCancels(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Defaults.ClientTimeout = &ClientTimeout{Auto: true}
	p.Rules = []Rule{{Tool: "fixed", ClientTimeout: &ClientTimeout{Wait: time.Hour}}}
	e, clk, _ := engine(t, p)
	ft := newTransport(t, e)
	ft.client(initialize("codex-mcp-client", "0.150.0"))
	ft.client(call(1, "report", ""))
	ft.client(call(2, "report", ""))
	ft.client(call(3, "fixed", ""))
	ft.client(cancel(1))
	ft.client(call(4, "report", ""))
	clk.Advance(time.Hour - time.Nanosecond)
	ft.none()
	clk.Advance(time.Nanosecond)
	wantClientTimeout(t, ft, 3, "1h0m0s")
	clk.Advance(10 * time.Hour)
	ft.none()
}

// TestClientTimeoutFromMeta: a request without initialize (protocol
// 2026-07-28) says who sent it in its _meta: auto reads it there.
func TestClientTimeoutFromMeta(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Defaults.ClientTimeout = &ClientTimeout{Auto: true}
	p.ClientTimeouts.Grace = dur(0)
	e, clk, _ := engine(t, p)
	ft := sessionless(t, e, "a")
	ft.client(call(1, "report", `,"_meta":{"io.modelcontextprotocol/clientInfo":{"name":"gemini-cli-mcp-client","version":"0.20.0"}}`))
	clk.Advance(10*time.Minute - time.Nanosecond)
	ft.none()
	clk.Advance(time.Nanosecond)
	wantClientTimeout(t, ft, 1, "10m0s")
}

// TestClientTimeoutNotForTasks: a call answered with a task is the
// task's now: its client timeout stops with the answer.
func TestClientTimeoutNotForTasks(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Defaults.ClientTimeout = &ClientTimeout{Wait: time.Minute}
	e, clk, _ := engine(t, p)
	ft := newTransport(t, e)
	ft.client(call(1, "long", `,"task":{"ttl":60000}`))
	ft.server(result(1, `{"task":{"taskId":"t-1","status":"working","createdAt":"2025-11-25T00:00:00Z","ttl":60000}}`))
	clk.Advance(time.Hour)
	ft.none()
}

// TestClientTimeoutRunsTheTimeoutHook: a client timeout runs on_timeout,
// as a deadline does.
func TestClientTimeoutRunsTheTimeoutHook(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "report", ClientTimeout: &ClientTimeout{Wait: time.Minute},
		OnCancel: &Hook{Exec: []string{"false"}}, OnTimeout: &Hook{Exec: []string{"true"}}}}
	e, clk, recs := engine(t, p)
	ft := newTransport(t, e)
	ft.client(call(1, "report", ""))
	clk.Advance(time.Minute)
	wantClientTimeout(t, ft, 1, "1m0s")
	clk.Advance(p.LateWindow)
	r := waitRecord(t, recs)
	if len(r.Hooks) != 1 || r.Hooks[0].Phase != "on_timeout" || !r.Hooks[0].OK {
		t.Errorf("hooks: %+v", r.Hooks)
	}
}

// TestClientTimeoutRestartsForAJoin: a re-issue that joins a call
// (reissue: join) restarts its client timeout; when that passes, the call
// and the re-issue, whose client gave up too, both end.
func TestClientTimeoutRestartsForAJoin(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "pay", Reissue: "join", ClientTimeout: &ClientTimeout{Wait: 5 * time.Minute}}}
	e, clk, _ := engine(t, p)
	ft := newTransport(t, e)
	first := ft.client(pay(1)).Request
	clk.Advance(4 * time.Minute)
	again := ft.client(pay(2)).Request
	clk.Advance(5*time.Minute - time.Nanosecond)
	ft.none()
	clk.Advance(time.Nanosecond)
	if a := ft.next(); a.kind != "expire" || a.call != first || a.source != proxy.SourceClientTimeout {
		t.Fatalf("%s of %v, want the call ended", a.kind, a.call)
	}
	if a := ft.next(); a.kind != "expire" || a.call != again || a.source != proxy.SourceClientTimeout {
		t.Fatalf("%s of %v, want the re-issue ended", a.kind, a.call)
	}
}

// TestClientTable: rows hold for their client's versions; the
// configuration's come first; the grace is added.
func TestClientTable(t *testing.T) {
	var tt ClientTimeouts
	if err := yaml.Unmarshal([]byte(`
grace: 10s
clients:
  - {name: codex-mcp-client, until: "0.40", waits: 60s, source: older releases}
  - {name: agent, from: "2", waits: 1m}
  - {name: agent, cancels: true}
`), &tt); err != nil {
		t.Fatal(err)
	}
	ct := newClientTable(&tt)
	for _, c := range []struct {
		name, version string
		want          time.Duration
	}{
		{"codex-mcp-client", "0.39.9", 70 * time.Second},
		{"codex-mcp-client", "0.40.0", 5*time.Minute + 10*time.Second},
		{"codex-mcp-client", "not a version", 5*time.Minute + 10*time.Second},
		{"agent", "2.0.1", 70 * time.Second},
		{"agent", "1.9", 0},
		{"claude-code", "2.1.0", 0},
		{"Codex-MCP-Client", "0.1", 0},
		{"", "", 0},
	} {
		if got, _ := ct.budget(clientInfo{c.name, c.version}); got != c.want {
			t.Errorf("%s %s: %v, want %v", c.name, c.version, got, c.want)
		}
	}
}

// TestBundledClients: every row of the bundled table is valid and names
// its source.
func TestBundledClients(t *testing.T) {
	rows := BundledClients()
	if len(rows) == 0 {
		t.Fatal("no rows")
	}
	tt := ClientTimeouts{Clients: rows}
	var problems []string
	tt.validate("clients.yaml", func(at, format string, a ...any) { problems = append(problems, at+": "+fmt.Sprintf(format, a...)) })
	for i, k := range rows {
		if len(k.Source) < 40 {
			problems = append(problems, fmt.Sprintf("row %d (%s): no source worth the name", i, k.Name))
		}
	}
	if len(problems) > 0 {
		t.Error(strings.Join(problems, "\n"))
	}
}

// TestClientTimeoutSettings: what the file may say, and what it may not.
func TestClientTimeoutSettings(t *testing.T) {
	for _, c := range []struct {
		yaml string
		want ClientTimeout
		err  string
	}{
		{"client_timeout: 5m", ClientTimeout{Wait: 5 * time.Minute}, ""},
		{"client_timeout: auto", ClientTimeout{Auto: true}, ""},
		{"client_timeout: off", ClientTimeout{}, ""},
		{"client_timeout: soon", ClientTimeout{}, "not a duration, auto or off"},
		{"client_timeout: [1]", ClientTimeout{}, "a duration, auto or off"},
	} {
		var r Rule
		err := yaml.Unmarshal([]byte(c.yaml), &r)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want %q", c.yaml, err, c.err)
		case c.err == "" && (err != nil || *r.ClientTimeout != c.want):
			t.Errorf("%s: %+v, %v", c.yaml, r.ClientTimeout, err)
		}
	}
	p := Defaults()
	p.Rules = []Rule{{Tool: "x", ClientTimeout: &ClientTimeout{Wait: -time.Second}}}
	p.ClientTimeouts = ClientTimeouts{Grace: dur(-1), Clients: []KnownClient{{Name: "a"}, {Waits: dur(time.Second), Cancels: true},
		{Name: "b", Waits: dur(time.Second), From: "2", Until: "1.5"}, {Name: "c", Cancels: true, From: "x"}}}
	err := p.Validate("policy")
	for _, want := range []string{"policy.rules[0].client_timeout: must not be negative", "policy.client_timeouts.grace: must not be negative",
		"clients[0]: a row needs waits", "clients[1].name:", "clients[1]: a row has waits or cancels", "clients[2].until: 1.5 is not after from 2",
		"clients[3].from: \"x\" is not a version"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validate: %v\nwant %q", err, want)
		}
	}
}

// TestLayers: which of timeout, max_timeout and client_timeout can end a
// call, and the warnings for those that never can.
func TestLayers(t *testing.T) {
	m := time.Minute
	for _, c := range []struct {
		name          string
		rule          Rule
		warn, explain string
	}{
		{"client first", Rule{Tool: "a", Timeout: dur(10 * m), ClientTimeout: &ClientTimeout{Wait: 5 * m}},
			"timeout 10m0s never ends a call: client_timeout 5m0s ends it first", "by its client's timeout, 5m0s"},
		{"deadline first", Rule{Tool: "a", Timeout: dur(m), ClientTimeout: &ClientTimeout{Wait: 5 * m}},
			"client_timeout 5m0s never ends a call: timeout 1m0s ends it first", "by its deadline, 1m0s after it starts"},
		{"max first", Rule{Tool: "a", Timeout: dur(m), ResetOnProgress: yes(), MaxTimeout: dur(2 * m), ClientTimeout: &ClientTimeout{Wait: 5 * m}},
			"client_timeout 5m0s never ends a call: max_timeout 2m0s ends every call first", "2m0s after it starts at the latest"},
		{"max never", Rule{Tool: "a", Timeout: dur(m), ResetOnProgress: yes(), MaxTimeout: dur(20 * m), ClientTimeout: &ClientTimeout{Wait: 5 * m}},
			"max_timeout 20m0s never ends a call: client_timeout 5m0s ends it first", "(a quiet call), or by its client's timeout, 5m0s after it starts (one that makes progress)"},
		{"both", Rule{Tool: "a", Timeout: dur(m), ResetOnProgress: yes(), ClientTimeout: &ClientTimeout{Wait: 5 * m}},
			"", "whichever comes first"},
		{"method", Rule{Method: "resources/read", ClientTimeout: &ClientTimeout{Wait: 5 * m}},
			"never applies: client_timeout is for tools/call", "by nothing but its answer or a cancel"},
		{"auto", Rule{Tool: "a", Timeout: dur(m), ClientTimeout: &ClientTimeout{Auto: true}},
			"", "a call of codex-mcp-client is ended by its deadline, 1m0s after it starts"},
	} {
		p := Defaults()
		p.Rules = []Rule{c.rule}
		var warns []string
		for _, w := range p.Warnings("policy") {
			warns = append(warns, w.Error())
		}
		if got := strings.Join(warns, "\n"); c.warn == "" && got != "" || !strings.Contains(got, c.warn) {
			t.Errorf("%s: warnings %q, want %q", c.name, got, c.warn)
		}
		if got := strings.Join(p.Explain(), "\n"); !strings.Contains(got, c.explain) {
			t.Errorf("%s: explained\n%s\nwant %q", c.name, got, c.explain)
		}
	}
}

// FuzzVersions: any two versions compare one way, the other way round
// the opposite; a row's bounds never panic.
func FuzzVersions(f *testing.F) {
	f.Add("0.46.1", "0.100")
	f.Add("v1.2.3-rc1", "1.2")
	f.Add("", "1..2")
	f.Fuzz(func(t *testing.T, a, b string) {
		if validVersion(a) && validVersion(b) && compareVersions(a, b) != -compareVersions(b, a) {
			t.Fatalf("%q and %q compare both ways", a, b)
		}
		k := KnownClient{Name: "x", From: a, Until: b, Cancels: true}
		k.holds("x", a)
		k.holds("x", b)
	})
}

// TestStatusSaysWhatEndsACall: the status page names the session's client
// and what ends one of its calls first, and when.
func TestStatusSaysWhatEndsACall(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Defaults.ClientTimeout = &ClientTimeout{Auto: true}
	p.Rules = []Rule{{Tool: "quick", Timeout: dur(time.Minute)}}
	e, clk, _ := engine(t, p)
	ft := newTransport(t, e)
	ft.client(initialize("codex-mcp-client", "0.150.0"))
	ft.client(call(1, "report", ""))
	clk.Advance(time.Minute)
	ft.client(call(2, "quick", "")) // its deadline of 1m ends it before the first's 4m30s left
	sessions := func() []SessionStatus { return e.Status().Sessions }
	st := sessions()
	if len(st) != 1 || st[0].Client != "codex-mcp-client 0.150.0" || st[0].Cancels || st[0].InFlight != 2 ||
		st[0].Next != "request 2: its deadline (timeout 1m0s, rules[0]) in 1m0s" {
		t.Fatalf("status: %+v", st)
	}
	ft.server(result(2, `{"content":[]}`))
	if st = sessions(); st[0].Next != "request 1: its client's timeout (client_timeout auto, defaults) in 4m30s" {
		t.Errorf("status: %+v", st)
	}
	ft.client(cancel(1))
	ft.client(call(3, "report", ""))
	if st = sessions(); !st[0].Cancels || st[0].Next != "" {
		t.Errorf("status once the client cancelled: %+v", st)
	}
}

// TestSpanOfAClientTimeout: the call's span records the client timeout
// and the cancel, with its source, and ends with the audit line.
func TestSpanOfAClientTimeout(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "render", ClientTimeout: &ClientTimeout{Wait: time.Minute}}}
	e, clk, recs := engine(t, p)
	ft, ended := tracedTransport(t, e)
	ft.client(call(1, "render", ""))
	clk.Advance(time.Minute)
	wantClientTimeout(t, ft, 1, "1m0s")
	clk.Advance(p.LateWindow)
	rec := waitRecord(t, recs)
	span := <-ended
	span.mu.Lock()
	defer span.mu.Unlock()
	if want := []string{proxy.EventClientTimeout, proxy.EventCancelAccepted}; !slices.Equal(span.events, want) {
		t.Errorf("events %q, want %q", span.events, want)
	}
	if span.attrs[proxy.AttrOutcome] != rec.Status || span.attrs[proxy.AttrSource] != "client_timeout" {
		t.Errorf("span attributes %v; audit %+v", span.attrs, rec)
	}
}

// TestClientOf: who the client is, from initialize or a request's _meta;
// a name too long is cut, and a request that says nothing says nobody.
func TestClientOf(t *testing.T) {
	long := strings.Repeat("x", 100_000)
	for _, c := range []struct {
		frame string
		want  clientInfo
	}{
		{initialize("codex-mcp-client", "0.150.0"), clientInfo{"codex-mcp-client", "0.150.0"}},
		{call(1, "a", `,"_meta":{"io.modelcontextprotocol/clientInfo":{"name":"gemini-cli-mcp-client","version":"1"}}`), clientInfo{"gemini-cli-mcp-client", "1"}},
		{call(1, "a", ""), clientInfo{}},
		{`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"clientInfo":{"name":7}}}`, clientInfo{}},
		{initialize(long, "1"), clientInfo{cut(long, clientInfoMax), "1"}},
	} {
		var f framing.Frame
		if err := f.Parse([]byte(c.frame)); err != nil {
			t.Fatal(err)
		}
		if got := clientOf(&f.Msgs[0]); got != c.want {
			t.Errorf("%.80s: %+v, want %+v", c.frame, got, c.want)
		}
	}
}

// FuzzClientOf: any request gives a client or none, never a panic, and
// never a name longer than kept.
func FuzzClientOf(f *testing.F) {
	f.Add(`{"clientInfo":{"name":"codex-mcp-client","version":"0.1"}}`)
	f.Add(`{"_meta":{"io.modelcontextprotocol/clientInfo":{"name":"a"}}}`)
	f.Fuzz(func(t *testing.T, params string) {
		for _, method := range []string{"initialize", "tools/call"} {
			var fr framing.Frame
			if fr.Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"`+method+`","params":`+params+`}`)) != nil || fr.Batch {
				return
			}
			c := clientOf(&fr.Msgs[0])
			if len(c.Name) > clientInfoMax+40 || len(c.Version) > clientInfoMax+40 {
				t.Fatalf("kept %d and %d bytes", len(c.Name), len(c.Version))
			}
		}
	})
}

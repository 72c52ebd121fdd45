package policy

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/natstest"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/fleet"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/jobs"
)

// hostileJobs are the jobs an attacker who can write a store file or
// publish on the fleet's subject would write: one in the format of earlier
// versions, which carried the hook's definition (here a command that leaves
// a mark), and one naming a hook by a digest no configuration has.
func hostileJobs(t *testing.T, mark string) []jobs.Job {
	def, _ := json.Marshal(map[string]any{"exec": []string{"/bin/sh", "-c", "touch " + mark}})
	ev := json.RawMessage(`{"event":"cancel","idempotency_key":"x"}`)
	now := time.Now()
	return []jobs.Job{
		{ID: "old-format", Phase: "on_cancel", Target: "sh", Definition: def, Event: ev, State: jobs.Pending, Created: now},
		{ID: "forged", Phase: "on_cancel", Target: "sh", HookDigest: "sha256:" + strings.Repeat("ab", 32), Event: ev,
			State: jobs.Pending, Created: now.Add(time.Millisecond)},
	}
}

// TestStoreRunsOnlyItsOwnHooks: the jobs of a store file left by another
// process are run only with hooks of this proxy's configuration, named by
// digest: a job carrying a definition (an earlier version's format) is kept
// as an orphan, a job whose digest no hook has is left in its file (for a
// proxy whose configuration has it; hooks list shows it), neither run,
// while a job of the proxy's own hook runs.
func TestStoreRunsOnlyItsOwnHooks(t *testing.T) {
	watchdog(t, 30*time.Second)
	rc := &receiver{}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	p := Defaults()
	own := &Hook{HTTP: &HTTPHook{URL: srv.URL}}
	p.Rules = []Rule{{Tool: "job", OnCancel: own}}
	dir := t.TempDir()
	mark := filepath.Join(t.TempDir(), "ran")
	other, err := jobs.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	all := append(hostileJobs(t, mark), jobs.Job{ID: "own", Phase: "on_cancel", Target: "POST", HookDigest: own.Digest(),
		Event: json.RawMessage(`{"event":"cancel","tool":"job","idempotency_key":"own"}`), State: jobs.Pending, Created: time.Now()})
	for i := range all {
		if err := other.Put(&all[i]); err != nil {
			t.Fatal(err)
		}
	}
	other.Close() // not empty: the file stays, for the next store to adopt
	e, recs := storeEngine(t, p, dir)
	if r := waitRecord(t, recs); r.Status != StatusResumedOK {
		t.Fatalf("the own hook's job: %+v", r)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("a job's own definition was run")
	}
	kept, _ := e.Jobs()
	if len(kept) != 1 || kept[0].ID != "old-format" || kept[0].State != jobs.Orphaned || kept[0].LastError == "" {
		t.Fatalf("store: %+v, want the earlier version's job as an orphan that says why", kept)
	}
	left, _, _ := jobs.Read(dir, nil)
	if len(left) != 1 || left[0].ID != "forged" || left[0].State != jobs.Pending {
		t.Fatalf("jobs left in the directory: %+v, want the one of an unknown digest, pending, not adopted", left)
	}
}

// TestStoreLeavesOtherConfigurationsJobs: a proxy with no policy (or
// another one) sharing a server's hook store with a proxy that ended
// leaves that proxy's pending job where it is: neither adopted nor
// orphaned, nor logged as forged (issue 39, item 7); a proxy whose
// configuration has the hook then adopts and runs it.
func TestStoreLeavesOtherConfigurationsJobs(t *testing.T) {
	watchdog(t, 30*time.Second)
	rc := &receiver{}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	hook := &Hook{HTTP: &HTTPHook{URL: srv.URL}}
	dir := t.TempDir()
	dead, err := jobs.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	job := jobs.Job{ID: "theirs", Phase: "on_cancel", Target: "POST", HookDigest: hook.Digest(),
		Event: json.RawMessage(`{"event":"cancel","tool":"job","idempotency_key":"theirs"}`), State: jobs.Pending, Created: time.Now()}
	if err := dead.Put(&job); err != nil {
		t.Fatal(err)
	}
	dead.Close()

	core, logs := observer.New(zapcore.DebugLevel)
	p := Defaults()
	p.Hooks.Store = dir
	bare, err := New(Options{Policy: p, Audit: Audit{Path: "off"}, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	if kept, _ := bare.Jobs(); len(kept) != 0 {
		t.Errorf("a proxy without the hook adopted %+v", kept)
	}
	bare.Shutdown()
	for _, l := range logs.All() {
		if l.Level >= zapcore.WarnLevel || strings.Contains(l.Message, "forged") {
			t.Errorf("logged %s %q", l.Level, l.Message)
		}
	}
	if logs.FilterMessageSnippet("left for a proxy that has it").Len() != 1 {
		t.Error("the job left was not said once")
	}
	if left, _, _ := jobs.Read(dir, nil); len(left) != 1 || left[0].ID != "theirs" || left[0].State != jobs.Pending {
		t.Fatalf("after the proxy without the hook: %+v, want the job pending, where it was", left)
	}

	p.Rules = []Rule{{Tool: "job", OnCancel: hook}}
	_, recs := storeEngine(t, p, dir)
	if r := waitRecord(t, recs); r.Status != StatusResumedOK {
		t.Fatalf("the job, under a configuration with its hook: %+v", r)
	}
}

// TestFleetRunsOnlyItsOwnHooks: jobs published on the fleet's subject by
// anyone who can are run by no replica unless they name one of its hooks:
// a job in an earlier version's format is refused at once, a job of an
// unknown digest goes round until its deliveries reach max_deliver; both
// then stay as orphans in the replica's store, and nothing ran.
func TestFleetRunsOnlyItsOwnHooks(t *testing.T) {
	watchdog(t, 30*time.Second)
	defer func(d time.Duration) { strayDelay = d }(strayDelay)
	strayDelay = 10 * time.Millisecond
	ns := natstest.Run(t, -1)
	rc, url := newFleetReceiver(t, func(int) int { return 200 })
	e, _, _ := replicaWith(t, fleet.Options{URL: ns.ClientURL(), AckWait: time.Second, MaxDeliver: 3}, fleetPolicy(url, 0), t.TempDir())
	cancelled(t, e, 1, "job")
	<-rc.got // the stream and its consumer exist once a job went through
	mark := filepath.Join(t.TempDir(), "ran")
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for _, j := range hostileJobs(t, mark) {
		b, _ := json.Marshal(j)
		if err := nc.Publish(fleet.JobSubject, b); err != nil {
			t.Fatal(err)
		}
	}
	var kept []jobs.Job
	waitFor(t, "two orphans", func() bool { kept, _ = e.Jobs(); return len(kept) == 2 })
	deliveries := map[string]int{}
	for _, j := range kept {
		if j.State != jobs.Orphaned {
			t.Errorf("job %s: %+v, want an orphan", j.ID, j)
		}
		deliveries[j.ID] = j.Attempts
	}
	if deliveries["old-format"] != 1 || deliveries["forged"] != 3 {
		t.Errorf("deliveries %v, want old-format 1 (refused at once), forged 3 (max_deliver)", deliveries)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("a job's own definition was run")
	}
}

// TestExecHookEnvironment: an exec hook gets none of the proxy's own
// variables (the NATS token) but those passed by name, and every other
// (OTEL_*); a request id and a tool name with CR and LF cannot forge a
// line of its environment.
func TestExecHookEnvironment(t *testing.T) {
	watchdog(t, 30*time.Second)
	t.Setenv("MCP_CANCEL_PROXY_NATS_TOKEN", "s3cret")
	t.Setenv("MCP_CANCEL_PROXY_PASSED", "yes")
	t.Setenv("OTEL_SERVICE_NAME", "svc")
	out := filepath.Join(t.TempDir(), "env")
	p := Defaults()
	p.Rules = []Rule{{Tool: "job*", OnCancel: &Hook{Exec: []string{"sh", "-c", `env > "$1"`, "hook", out}}}}
	recs := make(chan *Record, 4)
	e, err := New(Options{Policy: p, Audit: Audit{Path: "off"}, Logger: zaptest.NewLogger(t), PassEnv: []string{"MCP_CANCEL_PROXY_PASSED"},
		OnAudit: func(r *Record) { recs <- r }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	ft := newTransport(t, e)
	ft.client(`{"jsonrpc":"2.0","id":"1\r\nMCP_CANCEL_EVENT=forged","method":"tools/call","params":{"name":"job\nMCP_CANCEL_SOURCE=forged","arguments":{}}}`)
	ft.client(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"1\r\nMCP_CANCEL_EVENT=forged"}}`)
	ft.server(`{"jsonrpc":"2.0","id":"1\r\nMCP_CANCEL_EVENT=forged","result":{}}`)
	if r := waitRecord(t, recs); len(r.Hooks) != 1 || !r.Hooks[0].OK {
		t.Fatalf("audit: %+v", r)
	}
	env, _ := os.ReadFile(out)
	lines := strings.Split(string(env), "\n")
	has := func(prefix string) bool {
		for _, l := range lines {
			if strings.HasPrefix(l, prefix) {
				return true
			}
		}
		return false
	}
	for _, bad := range []string{"MCP_CANCEL_EVENT=forged", "MCP_CANCEL_SOURCE=forged", "MCP_CANCEL_PROXY_NATS_TOKEN="} {
		if has(bad) {
			t.Errorf("the hook's environment has a line %s...:\n%s", bad, env)
		}
	}
	for _, want := range []string{"MCP_CANCEL_PROXY_PASSED=yes", "OTEL_SERVICE_NAME=svc", `MCP_CANCEL_REQUEST_ID="1\r\nMCP_CANCEL_EVENT=forged"`} {
		if !has(want) {
			t.Errorf("the hook's environment lacks %s:\n%s", want, env)
		}
	}
}

// TestRedactURL: what is shown of a webhook URL.
func TestRedactURL(t *testing.T) {
	for _, c := range []struct {
		in   string
		path bool
		want string
	}{
		{"https://user:pass@hooks.example/h?token=abc&x=1", false, "https://REDACTED@hooks.example/h?token=REDACTED&x=REDACTED"},
		{"https://hooks.slack.com/services/T0/B0/secret", false, "https://hooks.slack.com/REDACTED"},
		{"https://x.webhook.office.com/webhookb2/secret", false, "https://x.webhook.office.com/REDACTED"},
		{"https://hooks.example/tok/secret#frag", true, "https://hooks.example/REDACTED"},
		{"http://127.0.0.1:9000/undo", false, "http://127.0.0.1:9000/undo"},
		{"::not a url", false, ""},
	} {
		if got := RedactURL(c.in, c.path); got != c.want {
			t.Errorf("RedactURL(%q, %v) = %q, want %q", c.in, c.path, got, c.want)
		}
	}
}

// TestWebhookSecretsNotShown: a webhook URL's password and query values
// appear in no log line, audit record, stored job or validation error.
func TestWebhookSecretsNotShown(t *testing.T) {
	watchdog(t, 30*time.Second)
	rc := &receiver{fail: 1 << 30}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	url := strings.Replace(srv.URL, "http://", "http://user:pa55word@", 1) + "/h?token=s3cret"
	p := Defaults()
	p.Rules = []Rule{{Tool: "job", OnCancel: &Hook{HTTP: &HTTPHook{URL: url}}}}
	p.Hooks.Store = t.TempDir()
	core, logs := observer.New(zapcore.DebugLevel)
	recs := make(chan *Record, 4)
	e, err := New(Options{Policy: p, Audit: Audit{Path: "off"}, Logger: zap.New(core), OnAudit: func(r *Record) { recs <- r }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	cancelled(t, e, 1, "job")
	r := waitRecord(t, recs)
	if r.Status != StatusOrphan {
		t.Fatalf("audit: %+v", r)
	}
	shown, _ := json.Marshal(r)
	all, _ := e.Jobs()
	jobs, _ := json.Marshal(all)
	var lines []string
	for _, l := range logs.All() {
		b, _ := json.Marshal(l.ContextMap())
		lines = append(lines, l.Message+" "+string(b))
	}
	bad := Policy{Rules: []Rule{{Tool: "x", OnCancel: &Hook{HTTP: &HTTPHook{URL: "ftp://user:pa55word@h/?token=s3cret"}}}}}
	for what, text := range map[string]string{"audit": string(shown), "stored job": string(jobs), "log": strings.Join(lines, "\n"),
		"validation": fmt.Sprint(bad.Validate("policy"))} {
		if strings.Contains(text, "pa55word") || strings.Contains(text, "s3cret") {
			t.Errorf("%s shows a secret of the URL: %s", what, text)
		}
	}
	if !strings.Contains(string(shown), "REDACTED") {
		t.Errorf("audit: %s, want the URL with its secrets redacted", shown)
	}
}

// TestWebhookAnswerReadBounded: a webhook that answers 2xx with a huge
// body succeeds, its first KiB kept for the audit, and the proxy stops
// reading it at a few KiB (it cost the proxy the whole answer in memory
// before): the receiver could not write it all.
func TestWebhookAnswerReadBounded(t *testing.T) {
	watchdog(t, 30*time.Second)
	const huge = 256 << 20
	wrote := make(chan int, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(huge))
		chunk := []byte(strings.Repeat("x", 64<<10))
		n := 0
		for n < huge {
			k, err := w.Write(chunk)
			n += k
			if err != nil {
				break
			}
		}
		wrote <- n
	}))
	defer srv.Close()
	p := Defaults()
	p.Rules = []Rule{{Tool: "job", OnCancel: &Hook{HTTP: &HTTPHook{URL: srv.URL}}}}
	e, recs := hookEngine(t, p)
	cancelled(t, e, 1, "job")
	r := waitRecord(t, recs)
	if len(r.Hooks) != 1 || !r.Hooks[0].OK || len(r.Hooks[0].Output) != hookOutputMax {
		t.Fatalf("audit: ok %v, output %d bytes; want a success with %d bytes kept", r.Hooks[0].OK, len(r.Hooks[0].Output), hookOutputMax)
	}
	if n := <-wrote; n >= huge {
		t.Errorf("the receiver wrote its whole %d-byte answer: the proxy read it all", n)
	}
}

// TestWebhookWithLargeHeaders: a webhook answering with 5 KiB of ordinary
// headers (a gateway's) succeeds (fasthttp's 4 KiB default failed it).
func TestWebhookWithLargeHeaders(t *testing.T) {
	watchdog(t, 30*time.Second)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range 60 {
			w.Header().Add("X-Policy", strings.Repeat("p", 90))
		}
	}))
	defer srv.Close()
	p := Defaults()
	p.Rules = []Rule{{Tool: "job", OnCancel: &Hook{HTTP: &HTTPHook{URL: srv.URL}}}}
	e, recs := hookEngine(t, p)
	cancelled(t, e, 1, "job")
	if r := waitRecord(t, recs); len(r.Hooks) != 1 || !r.Hooks[0].OK {
		t.Fatalf("audit: %+v", r.Hooks)
	}
}

// TestStoreUnwritableAtStart: a hook store that cannot be written at start
// (a full disk, a read-only mount; here a path under a file) no longer
// refuses the start: hooks run in memory.
func TestStoreUnwritableAtStart(t *testing.T) {
	watchdog(t, 30*time.Second)
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	rc := &receiver{}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	p := Defaults()
	p.Rules = []Rule{{Tool: "job", OnCancel: &Hook{HTTP: &HTTPHook{URL: srv.URL}}}}
	e, recs := storeEngine(t, p, filepath.Join(file, "store"))
	cancelled(t, e, 1, "job")
	if r := waitRecord(t, recs); len(r.Hooks) != 1 || !r.Hooks[0].OK {
		t.Fatalf("audit: %+v", r)
	}
	if _, err := e.Jobs(); err == nil {
		t.Error("Jobs without a store: no error")
	}
}

// TestCancelReasonCapped: a client's cancel reason of 8 MiB reaches the
// audit line (and the hook's event) cut to 256 bytes, marked as cut.
func TestCancelReasonCapped(t *testing.T) {
	watchdog(t, 30*time.Second)
	out := filepath.Join(t.TempDir(), "event")
	p := Defaults()
	p.Rules = []Rule{{Tool: "job", OnCancel: &Hook{Exec: []string{"sh", "-c", `cat > "$1"`, "hook", out}}}}
	e, recs := hookEngine(t, p)
	ft := newTransport(t, e)
	ft.client(call(1, "job", ""))
	ft.client(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"` + strings.Repeat("é", 4<<20) + `"}}`)
	ft.server(result(1, `{}`))
	r := waitRecord(t, recs)
	if len(r.Reason) > 300 || !strings.HasSuffix(r.Reason, "(cut: 8388608 bytes)") || !strings.HasPrefix(r.Reason, "éé") {
		t.Errorf("audited reason: %d bytes, %q...", len(r.Reason), r.Reason[:min(len(r.Reason), 40)])
	}
	ev, _ := os.ReadFile(out)
	if len(ev) > 4<<10 {
		t.Errorf("the hook's event: %d bytes", len(ev))
	}
}

// TestWebhookTakesEnvironmentVariables: ${NAME} in a webhook's URL and
// headers is the environment variable, as with --header (it was sent
// literally, "Bearer ${TOKEN}", while validate said ok); an unset one is
// a validation error naming the setting, not the value; the hook's digest
// (what stored and queued jobs name it by) is of the text as written, so
// that a rotated secret does not orphan them.
func TestWebhookTakesEnvironmentVariables(t *testing.T) {
	watchdog(t, 30*time.Second)
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.URL.Path + " " + r.Header.Get("Authorization")
	}))
	defer srv.Close()
	t.Setenv("HOOK_TOKEN", "s3cret")
	t.Setenv("HOOK_PATH", "undo")
	hook := &Hook{HTTP: &HTTPHook{URL: srv.URL + "/${HOOK_PATH}", Headers: map[string]string{"Authorization": "Bearer ${HOOK_TOKEN}"}}}
	p := Defaults()
	p.Rules = []Rule{{Tool: "job", OnCancel: hook}}
	if err := p.Validate("policy"); err != nil {
		t.Fatal(err)
	}
	digest := hook.Digest()
	e, recs := hookEngine(t, p)
	cancelled(t, e, 1, "job")
	if r := waitRecord(t, recs); len(r.Hooks) != 1 || !r.Hooks[0].OK {
		t.Fatalf("audit: %+v", r.Hooks)
	}
	if g := <-got; g != "/undo Bearer s3cret" {
		t.Errorf("the webhook got %q, want the variables taken in", g)
	}
	t.Setenv("HOOK_TOKEN", "rotated")
	if hook.Digest() != digest {
		t.Error("the hook's digest changed with the variable's value")
	}
	for _, h := range []*HTTPHook{{URL: srv.URL, Headers: map[string]string{"Authorization": "Bearer ${HOOK_UNSET}"}}, {URL: "https://${HOOK_UNSET}/x"}} {
		bad := Policy{Rules: []Rule{{Tool: "x", OnCancel: &Hook{HTTP: h}}}}
		err := bad.Validate("policy")
		if err == nil || !strings.Contains(err.Error(), "${HOOK_UNSET} is not set in the environment") {
			t.Errorf("%+v: validation says %v, want the unset variable named", h, err)
		}
	}
}

// TestWebhookAfterTheServerClosedIdleConnection: a webhook whose server
// closes a connection unused for a second (as Node's and uvicorn's do after
// five) gets the next hook on a new connection, at its first attempt: the
// POST went on the closed one and failed before (issue 39, item 1).
func TestWebhookAfterTheServerClosedIdleConnection(t *testing.T) {
	watchdog(t, 30*time.Second)
	rc := &receiver{}
	closed := make(chan struct{}, 4)
	srv := httptest.NewUnstartedServer(rc)
	srv.Config.IdleTimeout = time.Second
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			closed <- struct{}{}
		}
	}
	srv.Start()
	defer srv.Close()
	p := Defaults()
	p.Rules = []Rule{{Tool: "job", OnCancel: &Hook{HTTP: &HTTPHook{URL: srv.URL}}}}
	e, recs := hookEngine(t, p)
	cancelled(t, e, 1, "job")
	if r := waitRecord(t, recs); len(r.Hooks) != 1 || !r.Hooks[0].OK {
		t.Fatalf("the first hook: %+v", r.Hooks)
	}
	<-closed // the server closed the idle connection
	cancelled(t, e, 2, "job")
	if r := waitRecord(t, recs); len(r.Hooks) != 1 || !r.Hooks[0].OK || r.Hooks[0].Attempts != 1 {
		t.Fatalf("the hook after the server's idle close: %+v, want a success at its first attempt", r.Hooks)
	}
}

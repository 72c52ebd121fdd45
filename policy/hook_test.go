package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/rawmcp"
)

// hookEngine is engine with a real clock: hooks run in real time.
// Its audit includes the hooks' output.
func hookEngine(t *testing.T, p Policy) (*Engine, <-chan *Record) {
	return hookEngineAudit(t, p, Audit{Path: filepath.Join(t.TempDir(), "audit.jsonl"), IncludeHookOutput: true})
}

// hookEngineAudit is hookEngine with the audit configured by a.
func hookEngineAudit(t *testing.T, p Policy, a Audit) (*Engine, <-chan *Record) {
	t.Helper()
	if err := p.Validate("policy"); err != nil {
		t.Fatal(err)
	}
	recs := make(chan *Record, 16)
	e, err := New(Options{Policy: p, Audit: a, Logger: zaptest.NewLogger(t), OnAudit: func(r *Record) { recs <- r }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	return e, recs
}

// TestExecHookGetsTheEvent: an exec hook gets the event on stdin and the
// MCP_CANCEL_* variables, the captured job id among them.
func TestExecHookGetsTheEvent(t *testing.T) {
	watchdog(t, 30*time.Second)
	dir := t.TempDir()
	out := filepath.Join(dir, "event.json")
	p := Defaults()
	p.Rules = []Rule{{Tool: "job", Capture: map[string]Pointers{"job_id": {"/message"}},
		OnCancel: &Hook{Exec: []string{"sh", "-c", `cat > "$1"; env | grep ^MCP_CANCEL_ | sort > "$1.env"`, "hook", out}}}}
	e, recs := hookEngine(t, p)
	ft := newTransport(t, e)
	ft.client(call(1, "job", `,"_meta":{"progressToken":"t"}`))
	ft.server(progress("t", 1, "job-42"))
	ft.client(cancel(1))
	ft.server(result(1, `{}`)) // late: ends the wait for one
	r := waitRecord(t, recs)
	if len(r.Hooks) != 1 || !r.Hooks[0].OK || r.Status != StatusAnsweredLate {
		t.Fatalf("audit: %+v", r)
	}
	var ev HookEvent
	data, _ := os.ReadFile(out)
	if err := json.Unmarshal(data, &ev); err != nil {
		t.Fatalf("hook's stdin: %v: %s", err, data)
	}
	if ev.Event != "cancel" || ev.Tool != "job" || string(ev.Captured["job_id"]) != `"job-42"` || string(ev.Arguments) != `{"n":1}` ||
		ev.Source != "client" || ev.Reason != "user stop" || !ev.Dispatched || ev.IdempotencyKey == "" || ev.Attempt != 1 {
		t.Errorf("event: %+v", ev)
	}
	env, _ := os.ReadFile(out + ".env")
	for _, want := range []string{"MCP_CANCEL_CAPTURE_JOB_ID=job-42", "MCP_CANCEL_EVENT=cancel", "MCP_CANCEL_TOOL=job",
		"MCP_CANCEL_REQUEST_ID=1", "MCP_CANCEL_IDEMPOTENCY_KEY=" + ev.IdempotencyKey} {
		if !strings.Contains(string(env), want+"\n") {
			t.Errorf("environment lacks %s:\n%s", want, env)
		}
	}
}

// TestExecHookFailsThenOrphan: a hook that exits non-zero is retried, then
// recorded as an orphan with its output.
func TestExecHookFailsThenOrphan(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "job", OnCancel: &Hook{Exec: []string{"sh", "-c", "echo cannot reach the job service; exit 3"},
		Retries: 2, Backoff: time.Millisecond}}}
	e, recs := hookEngine(t, p)
	ft := newTransport(t, e)
	ft.client(call(1, "job", ""))
	ft.client(cancel(1))
	ft.server(result(1, `{}`))
	r := waitRecord(t, recs)
	if r.Status != StatusOrphan || len(r.Hooks) != 1 {
		t.Fatalf("audit: %+v", r)
	}
	h := r.Hooks[0]
	if h.OK || h.Attempts != 3 || !strings.Contains(h.Error, "exit status 3") || !strings.Contains(h.Output, "cannot reach") {
		t.Errorf("hook result: %+v", h)
	}
}

// TestExecHookThatHangsIsKilled: a hook past its timeout is killed with its
// whole process group, and forwarding never waits for it.
func TestExecHookThatHangsIsKilled(t *testing.T) {
	watchdog(t, 30*time.Second)
	pidFile := filepath.Join(t.TempDir(), "pid")
	p := Defaults()
	p.Rules = []Rule{{Tool: "job", OnCancel: &Hook{Exec: []string{"sh", "-c", `sleep 600 & echo $! > "$1"; wait`, "hook", pidFile},
		Timeout: 300 * time.Millisecond}}}
	e, recs := hookEngine(t, p)
	ft := newTransport(t, e)
	ft.client(call(1, "job", ""))
	ft.client(cancel(1))
	// The session goes on while the hook hangs.
	ft.client(call(2, "other", ""))
	ft.server(result(2, `{}`))
	ft.server(result(1, `{}`))
	r := waitRecord(t, recs)
	if r.Status != StatusOrphan || !strings.Contains(r.Hooks[0].Error, "timed out") {
		t.Fatalf("audit: %+v", r)
	}
	data, _ := os.ReadFile(pidFile)
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("the hook's child pid: %q", data)
	}
	if !gone(pid, 5*time.Second) {
		t.Errorf("the hook's child %d survived the hook's timeout", pid)
	}
}

// gone reports whether process pid has died (or is a zombie) within d. It
// polls: the process is nobody's child here, so there is nothing to wait on.
func gone(pid int, d time.Duration) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) > 0 && f[0] == "Z" {
			return true
		}
	}
	return false
}

// receiver is a real webhook receiver on loopback.
type receiver struct {
	mu     sync.Mutex
	bodies [][]byte
	keys   []string
	fail   int // answer 500 to this many requests first
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.bodies = append(rc.bodies, body)
	rc.keys = append(rc.keys, r.Header.Get("Idempotency-Key"))
	if rc.fail > 0 {
		rc.fail--
		http.Error(w, "try later", http.StatusInternalServerError)
		return
	}
	w.Write([]byte("compensated"))
}

// TestHTTPHookRetriesWithTheSameKey: the late result is POSTed to the
// receiver; a 5xx is retried, with the same idempotency key.
func TestHTTPHookRetriesWithTheSameKey(t *testing.T) {
	watchdog(t, 30*time.Second)
	rc := &receiver{fail: 1}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	p := Defaults()
	p.Rules = []Rule{{Tool: "write", OnLateResult: &Hook{HTTP: &HTTPHook{URL: srv.URL + "/compensate", Headers: map[string]string{"X-Team": "ops"}},
		Retries: 1, Backoff: time.Millisecond}}}
	e, recs := hookEngine(t, p)
	ft := newTransport(t, e)
	ft.client(call(1, "write", ""))
	ft.client(cancel(1))
	ft.server(result(1, `{"structuredContent":{"row":17}}`))
	r := waitRecord(t, recs)
	if r.Status != StatusCompensated || r.Hooks[0].Attempts != 2 || r.Hooks[0].Output != "compensated" {
		t.Fatalf("audit: %+v", r)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.keys) != 2 || rc.keys[0] == "" || rc.keys[0] != rc.keys[1] {
		t.Errorf("idempotency keys %q, want two equal ones", rc.keys)
	}
	var ev HookEvent
	json.Unmarshal(rc.bodies[1], &ev)
	if ev.Event != "late_result" || string(ev.Result) != `{"structuredContent":{"row":17}}` || ev.Attempt != 2 {
		t.Errorf("event: %s", rc.bodies[1])
	}
}

// TestHTTPHookUnreachable: a receiver that cannot be reached leaves an
// orphan, and says why.
func TestHTTPHookUnreachable(t *testing.T) {
	watchdog(t, 30*time.Second)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	url := "http://" + ln.Addr().String() + "/gone"
	ln.Close()
	p := Defaults()
	p.Rules = []Rule{{Tool: "job", OnCancel: &Hook{HTTP: &HTTPHook{URL: url}, Timeout: time.Second}}}
	e, recs := hookEngine(t, p)
	ft := newTransport(t, e)
	ft.client(call(1, "job", ""))
	ft.client(cancel(1))
	ft.server(result(1, `{}`))
	r := waitRecord(t, recs)
	if r.Status != StatusOrphan || !strings.Contains(r.Hooks[0].Error, "POST "+url) {
		t.Fatalf("audit: %+v", r)
	}
}

// TestHooksRunAtMostMaxRunning: beyond hooks.max_running, hooks wait.
func TestHooksRunAtMostMaxRunning(t *testing.T) {
	watchdog(t, 30*time.Second)
	arrived, release := make(chan struct{}, 8), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
	}))
	defer srv.Close()
	defer close(release)
	p := Defaults()
	p.Hooks.MaxRunning = 2
	p.Rules = []Rule{{Tool: "job", OnCancel: &Hook{HTTP: &HTTPHook{URL: srv.URL}, Timeout: 20 * time.Second}}}
	waits := &hookWaits{moved: make(chan int, 8)}
	e, err := New(Options{Policy: p, Audit: Audit{Path: "off"}, Logger: zaptest.NewLogger(t), Metrics: waits})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	ft := newTransport(t, e)
	for i := 1; i <= 3; i++ {
		ft.client(call(i, "job", ""))
		ft.client(cancel(i))
	}
	<-arrived
	<-arrived
	if n := <-waits.moved; n != 1 { // the third waits for a turn: it has not arrived, and will not
		t.Fatalf("hooks waiting: %d, want 1", n)
	}
	select {
	case <-arrived:
		t.Fatal("a third hook ran while two were running")
	default:
	}
	release <- struct{}{} // one ends: the third gets its turn
	if n := <-waits.moved; n != 0 {
		t.Fatalf("hooks waiting once a turn freed: %d, want 0", n)
	}
	<-arrived
}

// hookWaits reports each move of the hooks-waiting gauge, with its value.
type hookWaits struct {
	noMetrics
	mu    sync.Mutex
	n     int
	moved chan int
}

func (w *hookWaits) HooksWaiting(delta int) {
	w.mu.Lock()
	w.n += delta
	n := w.n
	w.mu.Unlock()
	w.moved <- n
}

// TestShutdownWaitsForHooksUpToItsBound: at shutdown a hook still running
// after hooks.shutdown_wait is killed and recorded as an orphan.
func TestShutdownWaitsForHooksUpToItsBound(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Hooks.ShutdownWait = 200 * time.Millisecond
	p.Rules = []Rule{{Tool: "job", OnCancel: &Hook{Exec: []string{"sleep", "600"}, Timeout: time.Minute}}}
	if err := p.Validate("policy"); err != nil {
		t.Fatal(err)
	}
	recs := make(chan *Record, 4)
	e, err := New(Options{Policy: p, Audit: Audit{Path: "off"}, Logger: zaptest.NewLogger(t), OnAudit: func(r *Record) { recs <- r }})
	if err != nil {
		t.Fatal(err)
	}
	ft := newTransport(t, e)
	ft.client(call(1, "job", ""))
	ft.client(cancel(1))
	ft.server(result(1, `{}`))
	e.Shutdown()
	r := waitRecord(t, recs)
	if r.Status != StatusOrphan || !strings.Contains(r.Hooks[0].Error, "shutdown") {
		t.Fatalf("audit: %+v", r)
	}
}

// TestExecHookRunsWhateverTheClientChose: NUL bytes in the request id, the
// tool name and a captured value cannot stop an exec hook: such values
// reach the environment JSON-encoded (issue 8, item 6).
func TestExecHookRunsWhateverTheClientChose(t *testing.T) {
	watchdog(t, 30*time.Second)
	out := filepath.Join(t.TempDir(), "env")
	p := Defaults()
	p.Rules = []Rule{{Tool: "job*", Capture: map[string]Pointers{"job_id": {"/message"}},
		OnCancel: &Hook{Exec: []string{"sh", "-c", `env | grep ^MCP_CANCEL_ | sort > "$1"`, "hook", out}}}}
	e, recs := hookEngine(t, p)
	ft := newTransport(t, e)
	ft.client(`{"jsonrpc":"2.0","id":"a\u0000b","method":"tools/call","params":{"name":"job\u0000x","arguments":{},"_meta":{"progressToken":"t"}}}`)
	ft.server(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1,"message":"x\u0000y"}}`)
	ft.client(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"a\u0000b"}}`)
	ft.server(`{"jsonrpc":"2.0","id":"a\u0000b","result":{}}`)
	r := waitRecord(t, recs)
	if len(r.Hooks) != 1 || !r.Hooks[0].OK {
		t.Fatalf("the hook did not run: %+v", r.Hooks)
	}
	env, _ := os.ReadFile(out)
	for _, want := range []string{`MCP_CANCEL_REQUEST_ID="a\u0000b"`, `MCP_CANCEL_TOOL="job\u0000x"`, `MCP_CANCEL_CAPTURE_JOB_ID="x\u0000y"`} {
		if !strings.Contains(string(env), want+"\n") {
			t.Errorf("environment lacks %s:\n%s", want, env)
		}
	}
}

// TestHookOutputStaysOutOfTheAudit: what a hook prints reaches the audit
// line only with audit.include_hook_output (issue 8, item 15).
func TestHookOutputStaysOutOfTheAudit(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "job", OnCancel: &Hook{Exec: []string{"sh", "-c", "echo secret-$MCP_CANCEL_ATTEMPT-token; exit 3"}}}}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	e, recs := hookEngineAudit(t, p, Audit{Path: path})
	ft := newTransport(t, e)
	ft.client(call(1, "job", ""))
	ft.client(cancel(1))
	ft.server(result(1, `{}`))
	if r := waitRecord(t, recs); len(r.Hooks) != 1 || r.Hooks[0].Output != "" {
		t.Errorf("audit hooks: %+v, want no output", r.Hooks)
	}
	if data, _ := os.ReadFile(path); strings.Contains(string(data), "secret-1-token") {
		t.Errorf("the audit file holds the hook's output: %s", data)
	}
}

// TestAuditLineWholeOrNotAtAll: a line the disk cut short is taken back,
// and failures are logged the first time, then once a minute (issue 8,
// item 16).
func TestAuditLineWholeOrNotAtAll(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a, err := openAudit(Audit{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	if err := a.write(&Record{Status: "first"}); err != nil {
		t.Fatal(err)
	}
	a.w = &cutShort{w: a.file, n: 10} // the disk fills ten bytes into the next line
	if err := a.write(&Record{Status: "second"}); err == nil {
		t.Fatal("a write cut short reported no error")
	}
	data, _ := os.ReadFile(path)
	if lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n"); len(lines) != 1 || !strings.Contains(lines[0], `"first"`) {
		t.Errorf("trail after a write cut short: %q, want the first line alone", data)
	}
	now := time.Now()
	for i, want := range []bool{true, false, false} {
		if log, count := a.failed(now); log != want || count != i+1 {
			t.Errorf("failure %d: log %v count %d", i+1, log, count)
		}
	}
	if log, _ := a.failed(now.Add(time.Minute)); !log {
		t.Error("no log line a minute later")
	}
}

// cutShort writes its first n bytes, then fails as a full disk does.
type cutShort struct {
	w io.Writer
	n int
}

func (c *cutShort) Write(p []byte) (int, error) {
	n, _ := c.w.Write(p[:min(len(p), c.n)])
	return n, syscall.ENOSPC
}

// TestAuditToAFullDevice: the real thing: /dev/full refuses every write.
func TestAuditToAFullDevice(t *testing.T) {
	a, err := openAudit(Audit{Path: "/dev/full"})
	if err != nil {
		t.Skip("no /dev/full here")
	}
	defer a.close()
	if err := a.write(&Record{Status: "x"}); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("write to /dev/full: %v, want ENOSPC", err)
	}
}

// TestHTTPHookAfterAnIdleClose: a webhook receiver that closes a
// keep-alive connection unused for a second (gunicorn's two, Node's five)
// gets the hook after the close whole, once, on a new connection: a
// regression guard beside the relay's (its requests carry their bodies as
// bytes, which a resend keeps).
func TestHTTPHookAfterAnIdleClose(t *testing.T) {
	watchdog(t, 30*time.Second)
	srv := rawmcp.Start(t, rawmcp.Options{IdleClose: time.Second})
	p := Defaults()
	p.Rules = []Rule{{Tool: "job", OnCancel: &Hook{HTTP: &HTTPHook{URL: "http://" + srv.Addr + "/compensate"}, Timeout: 10 * time.Second}}}
	e, recs := hookEngine(t, p)
	ft := newTransport(t, e)
	for i := range 2 {
		ft.client(call(i+1, "job", ""))
		ft.client(cancel(i + 1))
		ft.server(result(i+1, `{}`))
		if r := waitRecord(t, recs); len(r.Hooks) != 1 || !r.Hooks[0].OK {
			t.Fatalf("hook %d: audit %+v", i+1, r)
		}
		<-srv.Quiet() // the receiver closed the connection the hook came on
	}
	var bodies int
	for _, r := range srv.Received() {
		if r.Path != "/compensate" || len(r.Body) == 0 {
			t.Errorf("the receiver read %s %s with %d bytes", r.Method, r.Path, len(r.Body))
		}
		bodies++
	}
	if bodies != 2 || srv.IdleCloses() == 0 {
		t.Errorf("the receiver read %d hooks and closed %d idle connections, want 2 and some", bodies, srv.IdleCloses())
	}
}

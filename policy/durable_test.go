package policy

import (
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/jobs"
)

// storeEngine is hookEngine with the hook store in dir.
func storeEngine(t *testing.T, p Policy, dir string) (*Engine, <-chan *Record) {
	p.Hooks.Store = dir
	return hookEngine(t, p)
}

// cancelled runs one call of tool through e, cancels it, and has the
// server answer anyway.
func cancelled(t *testing.T, e *Engine, id int, tool string) {
	ft := newTransport(t, e)
	ft.client(call(id, tool, ""))
	ft.client(cancel(id))
	ft.server(result(id, `{}`))
}

// TestHookStoreKeepsOrphans: a hook whose retries ran out stays in the
// store as an orphan, with its attempts and last error; retried, it runs
// again with the same idempotency key and leaves the store; dropped, it
// is gone.
func TestHookStoreKeepsOrphans(t *testing.T) {
	watchdog(t, 30*time.Second)
	rc := &receiver{fail: 2}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	p := Defaults()
	p.Rules = []Rule{{Tool: "job", OnCancel: &Hook{HTTP: &HTTPHook{URL: srv.URL}}}}
	e, recs := storeEngine(t, p, t.TempDir())
	cancelled(t, e, 1, "job")
	cancelled(t, e, 2, "job")
	for range 2 {
		if r := waitRecord(t, recs); r.Status != StatusOrphan {
			t.Fatalf("audit: %+v, want an orphan", r)
		}
	}
	all, err := e.Jobs()
	if err != nil || len(all) != 2 {
		t.Fatalf("store: %+v, %v; want two orphans", all, err)
	}
	first := all[0]
	if first.State != jobs.Orphaned || first.Attempts != 1 || !strings.Contains(first.LastError, "HTTP 500") ||
		first.Tool != "job" || first.Phase != "on_cancel" {
		t.Errorf("orphan: %+v", first)
	}
	if n, err := e.RetryJobs(first.ID); n != 1 || err != nil {
		t.Fatalf("retry: %d, %v", n, err)
	}
	r := waitRecord(t, recs)
	if r.Status != StatusResumedOK || !r.Resumed || !r.Hooks[0].OK {
		t.Fatalf("retried hook's audit: %+v", r)
	}
	rc.mu.Lock()
	if len(rc.keys) != 3 || rc.keys[2] != first.ID {
		t.Errorf("keys %q: the retry must carry the orphan's key %q", rc.keys, first.ID)
	}
	rc.mu.Unlock()
	if n, err := e.DropJobs(""); n != 1 || err != nil {
		t.Errorf("drop all: %d, %v; want the other orphan", n, err)
	}
	if all, _ := e.Jobs(); len(all) != 0 {
		t.Errorf("store after retry and drop: %+v", all)
	}
	if _, err := e.RetryJobs("no-such-job"); err == nil {
		t.Error("retrying a job that is not there succeeded")
	}
}

// TestShutdownKeepsPendingHooks: with a store, a hook shutdown stopped is
// not an orphan: the audit says it is pending, and the store keeps it for
// the next start.
func TestShutdownKeepsPendingHooks(t *testing.T) {
	watchdog(t, 30*time.Second)
	dir := t.TempDir()
	p := Defaults()
	p.Hooks.ShutdownWait = 100 * time.Millisecond
	p.Hooks.Store = dir
	p.Rules = []Rule{{Tool: "job", OnCancel: &Hook{Exec: []string{"false"}, Retries: 3, Backoff: time.Hour}}}
	recs := make(chan *Record, 4)
	e, err := New(Options{Policy: p, Audit: Audit{Path: "off"}, Logger: zaptest.NewLogger(t), OnAudit: func(r *Record) { recs <- r }})
	if err != nil {
		t.Fatal(err)
	}
	cancelled(t, e, 1, "job")
	waitFor(t, "the first attempt failed", func() bool { all, _ := e.Jobs(); return len(all) == 1 && all[0].Attempts == 1 })
	e.Shutdown()
	r := waitRecord(t, recs)
	if r.Status != StatusCompensationPending || !r.Hooks[0].Pending {
		t.Fatalf("audit: %+v", r)
	}
	all, held, err := jobs.Read(dir, nil)
	if err != nil || held != 0 || len(all) != 1 || all[0].State != jobs.Pending || all[0].Attempts != 1 {
		t.Fatalf("store after shutdown: %+v, %d held, %v; want the job pending after 1 attempt", all, held, err)
	}
}

const crashDirEnv, crashURLEnv = "POLICY_TEST_CRASH_DIR", "POLICY_TEST_CRASH_URL"

// TestHookResumesAfterSIGKILL: a proxy killed with SIGKILL while its hook
// waits to retry: the next proxy started on the same store runs the hook
// to success, with the same idempotency key, and audits it.
func TestHookResumesAfterSIGKILL(t *testing.T) {
	watchdog(t, 30*time.Second)
	withHook := func(url string) Policy {
		p := Defaults()
		p.Rules = []Rule{{Tool: "job", OnCancel: &Hook{HTTP: &HTTPHook{URL: url}, Retries: 5, Backoff: 300 * time.Millisecond}}}
		return p
	}
	if dir := os.Getenv(crashDirEnv); dir != "" { // the proxy to be killed
		e, _ := storeEngine(t, withHook(os.Getenv(crashURLEnv)), dir)
		cancelled(t, e, 1, "job")
		select {}
	}
	rc := &receiver{fail: 1 << 30}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHookResumesAfterSIGKILL$")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir, crashURLEnv+"="+srv.URL)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	attempts := func() int { rc.mu.Lock(); defer rc.mu.Unlock(); return len(rc.keys) }
	waitFor(t, "the first attempt", func() bool { return attempts() >= 1 })
	cmd.Process.Kill()
	cmd.Wait()
	rc.mu.Lock()
	rc.fail = 0
	before := len(rc.keys)
	key := rc.keys[0]
	rc.mu.Unlock()
	e, recs := storeEngine(t, withHook(srv.URL), dir) // the same configuration: the job names its hook by digest
	r := waitRecord(t, recs)
	// The count is the store's: an attempt whose failure the killed proxy
	// had not yet written down is counted again.
	if r.Started.Before(time.Now().Add(-time.Minute)) {
		t.Errorf("the resumed hook's audit says the request started at %v", r.Started)
	}
	if r.Status != StatusResumedOK || r.Tool != "job" || r.Hooks[0].Attempts < 1 || r.Hooks[0].Attempts > before+1 {
		t.Fatalf("audit of the resumed hook: %+v (the killed proxy made %d attempts)", r, before)
	}
	rc.mu.Lock()
	if last := rc.keys[len(rc.keys)-1]; last != key {
		t.Errorf("resumed with key %q, want the first attempt's %q", last, key)
	}
	rc.mu.Unlock()
	if all, _ := e.Jobs(); len(all) != 0 {
		t.Errorf("store after the resumed hook succeeded: %+v", all)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "jobs-*.db")); len(files) != 1 {
		t.Errorf("store files: %v, want the running proxy's only", files)
	}
}

// waitFor polls an outside state (another process, a store) until cond
// holds, for 10 s at most.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling, bounded above
	}
}

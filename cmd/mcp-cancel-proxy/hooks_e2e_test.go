//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/admin"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/natstest"
)

// hookReceiver is a webhook receiver that fails while failing is set.
type hookReceiver struct {
	mu      sync.Mutex
	failing bool
	keys    []string
	hit     chan struct{}
}

func newHookReceiver(t *testing.T) (*hookReceiver, string) {
	rc := &hookReceiver{failing: true, hit: make(chan struct{}, 64)}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	return rc, srv.URL
}

func (rc *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc.mu.Lock()
	rc.keys = append(rc.keys, r.Header.Get("Idempotency-Key"))
	failing := rc.failing
	rc.mu.Unlock()
	rc.hit <- struct{}{}
	if failing {
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
	}
}

func (rc *hookReceiver) set(failing bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.failing = failing
}

func (rc *hookReceiver) lastKey() string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.keys[len(rc.keys)-1]
}

// hooksCLI runs `mcp-cancel-proxy hooks ARGS` and returns its output.
func hooksCLI(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(t.Context(), append([]string{"hooks"}, args...), nil, nopWriteCloser{&out}, &errOut); code != 0 {
		t.Fatalf("hooks %v: exit %d: %s%s", args, code, out.String(), errOut.String())
	}
	return out.String()
}

// listed returns the jobs `hooks list --json` printed.
func listed(t *testing.T, out string) []admin.JobView {
	t.Helper()
	var l struct{ Jobs []admin.JobView }
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("hooks list --json: %q: %v", out, err)
	}
	return l.Jobs
}

// cancelBlock calls the example server's block tool through w and cancels it.
func cancelBlock(t *testing.T, w *wrapped, id, key string) {
	w.send(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"block","arguments":{"key":"` + key + `"},"_meta":{"progressToken":"p` + id + `"}}}`)
	w.recvUntil(func(m map[string]any) bool { return concerns(m, mustNumber(id), "p"+id) })
	w.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + id + `}}`)
}

func mustNumber(id string) any {
	var n any
	json.Unmarshal([]byte(id), &n)
	return n
}

// webhookConfig writes a configuration whose block tool's on_cancel POSTs to
// url (with more of the hook's settings), its hook store in the
// configuration's directory, the late window short; head holds the
// sections that go before the policy (cluster, audit).
func webhookConfig(t *testing.T, url, head, more string) (cfg, dir string) {
	return writeConfig(t, head+`
policy:
  late_window: 1s
  hooks:
    store: $DIR/hooks
  rules:
    - tool: block
      on_cancel:
        http: {url: "`+url+`"}`+more+"\n")
}

// hookStoreSetup starts a failing webhook receiver and writes webhookConfig
// for it.
func hookStoreSetup(t *testing.T, more string) (*hookReceiver, string, string) {
	rc, url := newHookReceiver(t)
	cfg, dir := webhookConfig(t, url, "", more)
	return rc, cfg, dir
}

// TestE2EHookSurvivesSIGKILL: the wrapper is killed with SIGKILL while its
// on_cancel webhook waits to retry; the next wrapper started on the same
// hook store finishes the job, with the same idempotency key, and its audit
// line says so. Meanwhile `hooks list --admin` showed the job pending.
func TestE2EHookSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	rc, cfg, dir := hookStoreSetup(t, "\n        retries: 5\n        backoff: 500ms")
	adminAddr := freePort(t)
	first := startWrapped(t, "--config", cfg, "--admin", adminAddr, "--", proxyBin, "example-server")
	first.initialize(`{}`)
	cancelBlock(t, first, "1", "k1")
	<-rc.hit // the first attempt failed
	jobs := listed(t, hooksCLI(t, "list", "--admin", adminAddr, "--json"))
	if len(jobs) != 1 || jobs[0].State != "pending" || jobs[0].Tool != "block" || jobs[0].Phase != "on_cancel" {
		t.Fatalf("jobs of the running wrapper: %+v", jobs)
	}
	key := rc.lastKey()
	first.cmd.Process.Kill() // SIGKILL, mid-retry
	<-first.exited
	rc.set(false)
	second := startWrapped(t, "--config", cfg, "--", proxyBin, "example-server")
	second.logs.waitFor(t, `"status":"compensating hook ran after a restart"`, `"tool":"block"`)
	if got := rc.lastKey(); got != key {
		t.Errorf("resumed with idempotency key %q, want %q", got, key)
	}
	second.stdin.Close()
	<-second.exited
	if out := hooksCLI(t, "list", "--store", filepath.Join(dir, "hooks"), "--json"); len(listed(t, out)) != 0 {
		t.Errorf("store after the job succeeded: %s", out)
	}
}

// TestE2EHooksCommand: a webhook whose retries ran out leaves an orphan;
// `hooks retry` through the admin listener runs it again (same key), and
// once the wrapper has stopped, `hooks list` and `hooks drop` read and
// change the store's file directly.
func TestE2EHooksCommand(t *testing.T) {
	t.Parallel()
	rc, cfg, dir := hookStoreSetup(t, "")
	adminAddr := freePort(t)
	w := startWrapped(t, "--config", cfg, "--admin", adminAddr, "--", proxyBin, "example-server")
	w.initialize(`{}`)
	cancelBlock(t, w, "1", "k1")
	w.events.waitFor(t, events.HookFailed)
	jobs := listed(t, hooksCLI(t, "list", "--admin", adminAddr, "--json"))
	if len(jobs) != 1 || jobs[0].State != "orphaned" || !strings.Contains(jobs[0].LastError, "503") {
		t.Fatalf("orphans: %+v", jobs)
	}
	table := hooksCLI(t, "list", "--admin", adminAddr)
	if !strings.Contains(table, jobs[0].ID) || !strings.Contains(table, "orphaned") {
		t.Errorf("hooks list:\n%s", table)
	}
	rc.set(false)
	if out := hooksCLI(t, "retry", "--admin", adminAddr, jobs[0].ID); !strings.Contains(out, `"retried":1`) {
		t.Errorf("retry: %s", out)
	}
	w.logs.waitFor(t, `"status":"compensating hook ran after a restart"`)
	if got := rc.lastKey(); got != jobs[0].ID {
		t.Errorf("retried with key %q, want the orphan's %q", got, jobs[0].ID)
	}
	rc.set(true)
	cancelBlock(t, w, "2", "k2")
	w.events.waitFor(t, events.HookFailed, "id", "2")
	w.stdin.Close()
	<-w.exited
	store := filepath.Join(dir, "hooks")
	if jobs := listed(t, hooksCLI(t, "list", "--store", store, "--json")); len(jobs) != 1 || jobs[0].State != "orphaned" {
		t.Fatalf("store after a clean stop: %+v, want the second orphan", jobs)
	}
	if out := hooksCLI(t, "drop", "--all", "--store", store); !strings.Contains(out, "dropped: 1") {
		t.Errorf("drop: %s", out)
	}
	if out := hooksCLI(t, "list", "--store", store, "--json"); len(listed(t, out)) != 0 {
		t.Errorf("store after drop: %s", out)
	}
}

// TestE2EFleetHooks: two wrappers in one fleet (a real NATS server with
// JetStream): a cancel through the first puts its hook on the fleet's
// queue (its audit line says so, and reaches the fleet's audit subject),
// the hook runs once, on one replica, which audits it.
func TestE2EFleetHooks(t *testing.T) {
	t.Parallel()
	ns := natstest.Run(t, -1)
	feed, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Close()
	lines, _ := feed.SubscribeSync("fleet.audit")
	feed.Flush()
	rc, url := newHookReceiver(t)
	rc.set(false)
	cfg, _ := webhookConfig(t, url, `
cluster:
  nats: "`+ns.ClientURL()+`"
audit:
  path: stderr
  nats_subject: fleet.audit`, "")
	a := startWrapped(t, "--config", cfg, "--", proxyBin, "example-server")
	b := startWrapped(t, "--config", cfg, "--", proxyBin, "example-server")
	a.initialize(`{}`)
	b.initialize(`{}`)
	cancelBlock(t, a, "1", "k1")
	<-rc.hit
	a.events.waitFor(t, events.FleetMember)
	statuses := map[string]bool{}
	for !statuses["compensating hook ran (fleet)"] || !statuses["compensation queued to the fleet"] {
		msg, err := lines.NextMsg(20 * time.Second)
		if err != nil {
			t.Fatalf("fleet audit feed: %v (got %v)", err, statuses)
		}
		var rec struct{ Status string }
		json.Unmarshal(msg.Data, &rec)
		statuses[rec.Status] = true
	}
	select {
	case <-rc.hit:
		t.Error("the hook ran twice")
	default:
	}
}

// TestDeployFleetConfigValidates: the fleet example's configuration (the
// ConfigMap in deploy/kubernetes-fleet.yaml) passes validate.
func TestDeployFleetConfigValidates(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../deploy/kubernetes-fleet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "config.yaml: |\n")
	block, _, _ = strings.Cut(block, "\n---")
	if !ok {
		t.Fatal("no config.yaml in the ConfigMap")
	}
	var cfg strings.Builder
	for line := range strings.Lines(block) {
		cfg.WriteString(strings.TrimPrefix(line, "    "))
	}
	path := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(path, []byte(cfg.String()), 0o600)
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"validate", path}, nil, nopWriteCloser{&out}, &errOut); code != 0 {
		t.Errorf("validate: %d %s%s", code, out.String(), errOut.String())
	}
}

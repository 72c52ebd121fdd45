//go:build unix

package main

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy/jobs"
)

// TestE2EServersHaveTheirOwnHookStore: with no policy.hooks.store, each
// server's proxy keeps its jobs in a store of its own, named by a label and
// a hash (never the command line); `hooks list` says what each holds,
// --server one's jobs, --all every one's; a job left in the shared store
// of earlier versions is adopted by the next proxy to start.
func TestE2EServersHaveTheirOwnHookStore(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	shared := filepath.Join(state, "mcp-cancel-proxy", "hooks")
	old, err := jobs.Open(shared, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Put(&jobs.Job{ID: "left-by-an-old-proxy", Phase: "on_cancel", State: jobs.Orphaned, Created: time.Now(), Event: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	old.Close()

	rc, url := newHookReceiver(t) // failing: each cancel leaves an orphan
	_ = rc
	cfg, _ := writeConfig(t, `
policy:
  late_window: 1s
  rules:
    - tool: block
      on_cancel:
        http: {url: "`+url+`"}
`)
	orphan := func(args ...string) {
		w := startWrapped(t, append([]string{"--config", cfg, "--"}, args...)...)
		w.initialize(`{}`)
		cancelBlock(t, w, "1", "k1")
		w.events.waitFor(t, events.HookFailed)
		w.stdin.Close()
		<-w.exited
	}
	orphan(proxyBin, "example-server")
	orphan(proxyBin, "example-server", "--stateless")

	names := serverStores(shared)
	if len(names) != 2 {
		t.Fatalf("stores %q, want one per server", names)
	}
	for _, n := range names {
		if !regexp.MustCompile(`^mcp-cancel-proxy-[0-9a-f]{8}$`).MatchString(n) {
			t.Errorf("store %q: want the program's label and a hash, nothing of the command line", n)
		}
	}
	summary := hooksCLI(t, "list")
	for _, n := range names {
		if !strings.Contains(summary, n) {
			t.Errorf("hooks list does not name %s:\n%s", n, summary)
		}
	}
	counts := map[int]bool{}
	for _, n := range names {
		counts[len(listed(t, hooksCLI(t, "list", "--server", n, "--json")))] = true
	}
	if !counts[1] || !counts[2] {
		t.Errorf("jobs per store %v, want 2 (the adopted one and the first server's) and 1", counts)
	}
	all := listed(t, hooksCLI(t, "list", "--all", "--json"))
	if len(all) != 3 {
		t.Errorf("hooks list --all: %d jobs, want 3", len(all))
	}
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"hooks", "list", "--server", "mcp-cancel-proxy"}, nil, nopWriteCloser{&out}, &errOut); code == 0 ||
		!strings.Contains(errOut.String(), "names 2 of the stores") {
		t.Errorf("a label two stores share: exit %d, %q", code, errOut.String())
	}
}

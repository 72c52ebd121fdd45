//go:build unix

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestE2ETypeScriptClientReissueJoins: the TypeScript SDK client times out
// on a call of a reissue: join tool (it cancels it) and issues it again;
// the proxy holds the cancel and the re-issue joins the call still running.
// The server runs the tool once (its log says so); the re-issue gets its
// answer and its later progress. Through the wrapper, and through the
// bridge to the example server over Streamable HTTP.
func TestE2ETypeScriptClientReissueJoins(t *testing.T) {
	node, dir := nodePeers(t)
	config, _ := writeConfig(t, "policy:\n  rules:\n    - tool: block\n      reissue: join\n")
	t.Run("wrapper", func(t *testing.T) {
		watchdog(t, 90*time.Second)
		r := reissueScript(t, node, dir, config, "")
		if r.Executions != 1 {
			t.Errorf("the server ran the tool %d times, want 1", r.Executions)
		}
	})
	t.Run("bridge", func(t *testing.T) {
		watchdog(t, 90*time.Second)
		up := freePort(t)
		cmd := exec.Command(proxyBin, "example-server", "--http", up)
		server := startServer(t, cmd)
		waitListening(t, up)
		reissueScript(t, node, dir, config, "http://"+up+"/mcp")
		cmd.Process.Kill()
		<-server.done // its whole log
		if n := strings.Count(server.all(), "example server: block pay: started"); n != 1 {
			t.Errorf("the server ran the tool %d times, want 1", n)
		}
	})
}

// reissueSummary is what ts-client-reissue.mjs saw.
type reissueSummary struct {
	First                        string
	Second                       struct{ JobID, Status string }
	Progress, Executions, Joined int
	Errors                       []string
}

// reissueScript runs ts-client-reissue.mjs, through the bridge to upstream
// if it is set, and checks what the client saw.
func reissueScript(t *testing.T, node, dir, config, upstream string) reissueSummary {
	t.Helper()
	cmd := exec.Command(node, filepath.Join(dir, "e2e", "ts-client-reissue.mjs"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PROXY_BIN="+proxyBin, "CONFIG="+config, "UPSTREAM="+upstream)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ts-client-reissue.mjs: %v\n%s", err, out)
	}
	var r reissueSummary
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("bad summary %q: %v", out, err)
	}
	t.Logf("summary: %s", out)
	if !strings.Contains(r.First, "timed out") || r.Second.Status != "released" || r.Second.JobID != "pay" || r.Progress < 1 || len(r.Errors) != 0 {
		t.Errorf("client: first call %q, re-issue %+v with %d progress, errors %q; want a timeout, then the released answer with progress",
			r.First, r.Second, r.Progress, r.Errors)
	}
	if r.Joined != 1 {
		t.Errorf("the proxy joined %d re-issues, want 1", r.Joined)
	}
	return r
}

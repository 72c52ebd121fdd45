//go:build unix

package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// TestE2ETypeScriptClientReissueJoins: the TypeScript SDK client times out
// on a call of a reissue: join tool (it cancels it) and issues it again;
// the proxy holds the cancel and the re-issue joins the call still running.
// The server runs the tool once (its log says so); the re-issue gets its
// answer and its later progress. Through the wrapper, through the bridge
// to the example server over Streamable HTTP, and, with the SDK's HTTP+SSE
// client, through the sidecar's old-client front to the same server.
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
	// The sidecar's fronts, over the example server as a Streamable HTTP
	// upstream and as a stdio server it runs.
	for _, tc := range []struct{ name, path string }{
		{"old-client front", "/sse"},
		{"Streamable HTTP front", "/mcp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			watchdog(t, 90*time.Second)
			up, front := freePort(t), freePort(t)
			cmd := exec.Command(proxyBin, "example-server", "--http", up)
			server := startServer(t, cmd)
			waitListening(t, up)
			reissueThroughSidecar(t, node, dir, "http://"+front+tc.path,
				"--config", config, "--log-level", "debug", "--listen", front, "--upstream", "http://"+up+"/mcp")
			cmd.Process.Kill()
			<-server.done // its whole log
			if n := strings.Count(server.all(), "example server: block pay: started"); n != 1 {
				t.Errorf("the server ran the tool %d times, want 1", n)
			}
		})
		t.Run(tc.name+" over stdio", func(t *testing.T) {
			watchdog(t, 90*time.Second)
			front := freePort(t)
			sc := reissueThroughSidecar(t, node, dir, "http://"+front+tc.path,
				"--config", config, "--log-level", "debug", "--listen", front, "--", proxyBin, "example-server")
			sc.cmd.Process.Signal(syscall.SIGTERM)
			<-sc.exited // its whole log: the server's stderr passes through it
			if n := strings.Count(sc.logs.all(), "example server: block pay: started"); n != 1 {
				t.Errorf("the server ran the tool %d times, want 1", n)
			}
		})
	}
}

// reissueThroughSidecar starts the sidecar with args and runs
// ts-client-reissue.mjs as its client at url, and checks what the client
// saw and that the sidecar joined the re-issue; it returns the sidecar.
func reissueThroughSidecar(t *testing.T, node, dir, url string, args ...string) *wrapped {
	t.Helper()
	sc := startWrapped(t, args...)
	sc.events.waitFor(t, events.SidecarListening)
	t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) }) // runs before startWrapped's own
	script := exec.Command(node, filepath.Join(dir, "e2e", "ts-client-reissue.mjs"))
	script.Dir = dir
	script.Env = append(os.Environ(), "SIDECAR_URL="+url)
	script.Stderr = os.Stderr
	stdin, _ := script.StdinPipe()
	stdout, _ := script.StdoutPipe()
	if err := script.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { script.Process.Kill(); script.Wait() }) // by its PID, if the test ends early
	out := bufio.NewScanner(stdout)
	if !out.Scan() || out.Text() != "REISSUED" {
		t.Fatalf("script said %q, want REISSUED", out.Text())
	}
	sc.events.waitFor(t, events.ReissueJoined) // held by the sidecar, never sent
	io.WriteString(stdin, "GO\n")
	if !out.Scan() {
		t.Fatalf("no summary from the script: %v", out.Err())
	}
	checkReissue(t, []byte(out.Text()))
	sc.events.waitFor(t, events.Joined)
	return sc
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
	r := checkReissue(t, out)
	if r.Joined != 1 {
		t.Errorf("the proxy joined %d re-issues, want 1", r.Joined)
	}
	return r
}

// checkReissue checks what the client saw: the first call timed out, the
// re-issue got the answer and its progress.
func checkReissue(t *testing.T, out []byte) reissueSummary {
	t.Helper()
	var r reissueSummary
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("bad summary %q: %v", out, err)
	}
	t.Logf("summary: %s", out)
	if !strings.Contains(r.First, "timed out") || r.Second.Status != "released" || r.Second.JobID != "pay" || r.Progress < 1 || len(r.Errors) != 0 {
		t.Errorf("client: first call %q, re-issue %+v with %d progress, errors %q; want a timeout, then the released answer with progress",
			r.First, r.Second, r.Progress, r.Errors)
	}
	return r
}

//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/exampleserver"
)

// TestE2ECheckKnownServers runs `check --json` against the real servers
// whose cancellation is known (../shared/PEERS.md) and compares the lines
// that are theirs to give; a line that depends on timing alone (mcp-go's
// race, which it may lose or win) is not compared.
func TestE2ECheckKnownServers(t *testing.T) {
	t.Parallel()
	node, dir := nodePeers(t)
	everything := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	pyEnv, pyArgv := fastMCP(t)
	mcpgo := buildMcpGo(t)
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want map[string]string // check: verdict (/rank)
		exit int
	}{
		{"go-sdk honours", nil, []string{"--tool", "slow_honour", "--args", `{"seconds":20,"steps":40}`, "--", proxyBin, "example-server"},
			map[string]string{"cancel": "pass", "late-answer": "fail/SHOULD", "progress-after-cancel": "pass", "race": "pass", "cancel-finished": "pass", "cancel-unknown": "pass", "cancel-initialize": "pass", "task-cancel": "skip"}, 0},
		{"go-sdk ignores", nil, []string{"--tool", "slow_ignore", "--args", `{"seconds":20,"steps":40}`, "--", proxyBin, "example-server"},
			map[string]string{"cancel": "fail/SHOULD", "progress-after-cancel": "fail/SHOULD", "race": "skip"}, 0},
		{"mcp-go", nil, []string{"--tool", "wait_for_cancel", "--", mcpgo},
			map[string]string{"cancel": "pass", "late-answer": "fail/SHOULD", "progress-after-cancel": "pass", "cancel-unknown": "pass", "cancel-initialize": "pass"}, 0},
		{"server-everything", nil, []string{"--tool", "trigger-long-running-operation", "--args", `{"duration":20,"steps":40}`, "--", node, everything, "stdio"},
			map[string]string{"late-answer": "pass", "progress-after-cancel": "fail/SHOULD", "cancel-unknown": "pass", "cancel-initialize": "pass"}, 0},
		// A task tool (2025-11-25): its plain call answers at once (the
		// cancel line skips), and tasks/cancel moves its task to cancelled.
		{"server-everything tasks", nil, []string{"--tool", "simulate-research-query", "--args", `{"topic":"x","ambiguous":false}`, "--", node, everything, "stdio"},
			map[string]string{"cancel": "skip", "task-cancel": "pass", "cancel-unknown": "pass", "cancel-initialize": "pass"}, 0},
		{"FastMCP", pyEnv, append([]string{"--tool", "slow", "--args", `{"seconds":20,"steps":40}`, "--"}, pyArgv...),
			map[string]string{"cancel": "pass", "late-answer": "fail/SHOULD", "progress-after-cancel": "pass", "race": "pass", "cancel-unknown": "pass", "cancel-initialize": "pass"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, code, out := runCheck(t, c.env, c.args...)
			compareChecks(t, got, c.want, code, c.exit, out)
		})
	}
}

// TestE2ECheckOverHTTP: check --url reaches the example server as the
// bridge does, over Streamable HTTP with a session, without one, and over
// the 2024-11-05 HTTP+SSE transport. With a session and over HTTP+SSE the
// verdicts are the same as over stdio (a late isError answer, the race
// passed, stray cancels ignored), though no line claims the handler
// stopped, and a session's late cancel POST is accepted. Without a session the bridge sends the calls as 2026-07-28
// ones and cancels by closing their streams: no late answer can come, and
// a cancel that comes before the call's headers still stops it (the race).
func TestE2ECheckOverHTTP(t *testing.T) {
	t.Parallel()
	call := []string{"--tool", "slow_honour", "--args", `{"seconds":20,"steps":40}`}
	stdioLike := map[string]string{"cancel": "pass", "late-answer": "fail/SHOULD", "progress-after-cancel": "pass", "race": "pass",
		"cancel-finished": "pass", "cancel-unknown": "pass", "cancel-initialize": "pass"}
	for _, c := range []struct {
		name, path string
		serve      []string
		want       map[string]string
	}{
		{"streamable", "/mcp", []string{"--http"}, with(stdioLike, "http-cancel-status", "pass")},
		{"streamable stateless", "/mcp", []string{"--stateless", "--http"}, with(stdioLike, "late-answer", "pass")},
		// No Streamable HTTP POST goes to an HTTP+SSE server's URL (before,
		// its http-cancel-status line came of one).
		{"sse", "/sse", []string{"--sse"}, with(stdioLike, "http-cancel-status", "")},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			up := freePort(t)
			startBackground(t, proxyBin, append(append([]string{"example-server"}, c.serve...), up)...)
			waitListening(t, up)
			got, code, out := runCheck(t, nil, append([]string{"--url", "http://" + up + c.path}, call...)...)
			compareChecks(t, got, c.want, code, 0, out)
			// Over HTTP, whether a handler stopped cannot be seen: no line
			// claims it (before: "honoured", "stopped").
			if bytes.Contains(out, []byte("honoured")) || bytes.Contains(out, []byte("stopped:")) {
				t.Errorf("a line claims a stop over HTTP:\n%s", out)
			}
		})
	}
}

// with is m and one more entry.
func with(m map[string]string, k, v string) map[string]string {
	out := maps.Clone(m)
	out[k] = v
	return out
}

// runCheck runs `check --json` with short windows and returns its lines
// as check: verdict(/rank), its exit status and its output.
func runCheck(t *testing.T, env []string, args ...string) (map[string]string, int, []byte) {
	t.Helper()
	cmd := exec.Command(proxyBin, append([]string{"check", "--json", "--runs", "2", "--watch", "2s"}, args...)...)
	cmd.Env = append(cmd.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	code := 0
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Lines []struct{ Check, Verdict, Rank, Says string }
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("exit %d, not a JSON report: %v\n%s", code, err, out)
	}
	got := map[string]string{}
	for _, l := range r.Lines {
		v := l.Verdict
		if l.Rank != "" {
			v += "/" + l.Rank
		}
		got[l.Check] = v
	}
	return got, code, out
}

// compareChecks fails t where a line of want differs, or the exit status.
func compareChecks(t *testing.T, got, want map[string]string, code, wantCode int, out []byte) {
	t.Helper()
	for check, w := range want {
		if got[check] != w {
			t.Errorf("%s: %q, want %q", check, got[check], w)
		}
	}
	if code != wantCode || t.Failed() {
		t.Errorf("exit %d (want %d); the report:\n%s", code, wantCode, out)
	}
}

// TestE2ECheckHeader: check --url sends --header on every request. A
// server that wants a key (the example server behind a check of its
// Authorization header) answers 401 without it: check says so and exits
// 1; with it, check lists the tools.
func TestE2ECheckHeader(t *testing.T) {
	t.Parallel()
	s := exampleserver.New()
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k-123" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="check-test"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	run := func(args ...string) (string, int) {
		cmd := exec.Command(proxyBin, append([]string{"check", "--url", srv.URL + "/mcp"}, args...)...)
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.CombinedOutput()
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			return string(out), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	if out, code := run("--header", "Authorization: Bearer k-123"); code != 0 || !strings.Contains(out, "slow_honour") {
		t.Errorf("with the key: exit %d, want 0 and the tools listed:\n%s", code, out)
	}
	if out, code := run(); code != 1 || !strings.Contains(out, "401") {
		t.Errorf("without the key: exit %d, want 1 and the server's 401 named:\n%s", code, out)
	}
}

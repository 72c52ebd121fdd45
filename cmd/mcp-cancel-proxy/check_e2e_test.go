//go:build unix

package main

import (
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestE2ECheckKnownServers runs `check --json` against the real servers
// whose cancellation is known (../shared/PEERS.md) and compares the lines
// that are theirs to give; a line that depends on timing alone (mcp-go's
// race, which it may lose or win) is not compared.
func TestE2ECheckKnownServers(t *testing.T) {
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
			map[string]string{"late-answer": "fail/SHOULD", "progress-after-cancel": "pass", "race": "pass", "cancel-finished": "pass", "cancel-unknown": "pass", "cancel-initialize": "pass", "task-cancel": "skip"}, 0},
		{"go-sdk ignores", nil, []string{"--tool", "slow_ignore", "--args", `{"seconds":20,"steps":40}`, "--", proxyBin, "example-server"},
			map[string]string{"cancel": "fail/SHOULD", "progress-after-cancel": "fail/SHOULD", "race": "skip"}, 0},
		{"mcp-go", nil, []string{"--tool", "wait_for_cancel", "--", mcpgo},
			map[string]string{"late-answer": "fail/SHOULD", "progress-after-cancel": "pass", "cancel-unknown": "pass", "cancel-initialize": "pass"}, 0},
		{"server-everything", nil, []string{"--tool", "trigger-long-running-operation", "--args", `{"duration":20,"steps":40}`, "--", node, everything, "stdio"},
			map[string]string{"late-answer": "pass", "progress-after-cancel": "fail/SHOULD", "cancel-unknown": "pass", "cancel-initialize": "pass"}, 0},
		{"FastMCP", pyEnv, append([]string{"--tool", "slow", "--args", `{"seconds":20,"steps":40}`, "--"}, pyArgv...),
			map[string]string{"late-answer": "fail/SHOULD", "progress-after-cancel": "pass", "race": "pass", "cancel-unknown": "pass", "cancel-initialize": "pass"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"check", "--json", "--runs", "2", "--watch", "2s"}, c.args...)
			cmd := exec.Command(proxyBin, args...)
			cmd.Env = append(cmd.Environ(), c.env...)
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
			for check, want := range c.want {
				if got[check] != want {
					t.Errorf("%s: %q, want %q", check, got[check], want)
				}
			}
			if code != c.exit || t.Failed() {
				t.Errorf("exit %d (want %d); the report:\n%s", code, c.exit, out)
			}
		})
	}
}

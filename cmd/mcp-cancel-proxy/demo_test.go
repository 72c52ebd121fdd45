package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDemoNamesItsServer: the demo's header names the bundled example
// server (it showed the binary's path, a build cache's under go run), and
// a server given as a whole command, with --server or after --, runs.
func TestDemoNamesItsServer(t *testing.T) {
	for _, c := range []struct {
		args []string
		head string
	}{
		{[]string{"demo"}, "client <-> proxy <-> the bundled example server (mcp-cancel-proxy example-server)\n"},
		{[]string{"demo", "--server", proxyBin + " example-server"}, "client <-> proxy <-> " + proxyBin + " example-server\n"},
		{[]string{"demo", "--", proxyBin, "example-server"}, "client <-> proxy <-> " + proxyBin + " example-server\n"},
	} {
		out, err := exec.Command(proxyBin, c.args...).Output()
		if err != nil || !strings.Contains(string(out), c.head) || !strings.Contains(string(out), "cancels forwarded 2") {
			t.Errorf("%v: %v\n%s", c.args, err, out)
		}
	}
}

package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemoNamesItsServer: the demo's header names the bundled example
// server (it showed the binary's path, a build cache's under go run), and
// a server given as a whole command, with --server or after --, runs.
func TestDemoNamesItsServer(t *testing.T) {
	t.Parallel()
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

// TestDemoDrawsTheTimeline: demo --svg records a real cancelled call to a
// tool that ignores the cancel, without the proxy and through it, and
// draws both: a well-formed SVG whose first lane has the late progress and
// answer the client got, and whose second has none.
func TestDemoDrawsTheTimeline(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "timeline.svg")
	out, err := exec.Command(proxyBin, "demo", "--svg", path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "0 with it") {
		t.Fatalf("demo --svg: %v\n%s", err, out)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for d := xml.NewDecoder(bytes.NewReader(b)); ; {
		if _, err := d.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
	}
	without, with, ok := strings.Cut(string(b), ">with mcp-cancel-proxy<")
	if !ok || !strings.Contains(without, "late answer") || !strings.Contains(without, "late progress") ||
		strings.Contains(with, "late") || !strings.Contains(with, "answer held back by the proxy") {
		t.Errorf("the lanes do not tell what the client got:\n%s", b)
	}
}

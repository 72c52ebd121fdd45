package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// freePort returns a loopback address that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		port := freePortLow + rand.IntN(freePortHigh-freePortLow)
		if portsGiven[port] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		ln.Close()
		portsGiven[port] = true
		return ln.Addr().String()
	}
	t.Fatal("no free port found")
	return ""
}

// freePort picks its ports below the kernel's range of ephemeral ports
// (32768-60999 on Linux), never the same one twice in a run: a port that
// net.Listen(":0") gave and freed could be taken as the local port of any
// outgoing connection before the process it was meant for binds it.
const freePortLow, freePortHigh = 20000, 32768

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

// startBackground starts a process for the test and stops it, by its PID,
// when the test ends.
func startBackground(t *testing.T, name string, args ...string) {
	startBackgroundEnv(t, nil, name, args...)
}

// startBackgroundEnv is startBackground with extra environment variables.
func startBackgroundEnv(t *testing.T, env []string, name string, args ...string) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
}

// waitListening waits until addr accepts connections.
func waitListening(t *testing.T, addr string) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never listened: %v", addr, err)
		}
		// The only sign of readiness another program gives is its port:
		// poll it, bounded by the deadline above.
		time.Sleep(20 * time.Millisecond)
	}
}

// conformance runs the official suite's server mode, from the npm package
// pkg, against url and returns its passed and failed counts.
func conformance(t *testing.T, node, dir, pkg, url string, extra ...string) (passed, failed int) {
	args := append([]string{filepath.Join(dir, "node_modules", pkg, "dist", "index.js"), "server", "--url", url}, extra...)
	cmd := exec.Command(node, args...)
	cmd.Dir = t.TempDir()
	out, _ := cmd.CombinedOutput() // exits non-zero when a check fails; the counts say which
	if passed, failed = conformanceTotals(out); failed < 0 {
		t.Fatalf("conformance against %s printed no total:\n%s", url, out)
	}
	if failed > 0 {
		t.Logf("conformance against %s:\n%s", url, out)
	}
	return passed, failed
}

// TestConformanceThroughSidecar runs the official conformance suite in
// server mode against the go-sdk's conformance everything-server directly
// and through the sidecar: the sidecar must pass exactly as many checks,
// dns-rebinding-protection included, and fail none. Two lines of the suite:
// 0.1.16 against the stateful server (protocol revisions up to 2025-11-25),
// in front of it over HTTP and with it on stdio behind the sidecar (a child
// per session), and 0.2.0-alpha.12 with --spec-version 2026-07-28 against
// the stateless one, over HTTP and on stdio behind the sidecar (one shared
// child), with the scenarios of the 2026-07-28 header checks besides (in
// front of a stdio server the sidecar makes them itself).
func TestConformanceThroughSidecar(t *testing.T) {
	t.Parallel()
	node, dir := nodePeers(t)
	watchdog(t, 10*time.Minute) // the build, and the lines of the suite, which wait for their turns
	server := filepath.Join(t.TempDir(), "everything-server")
	build := exec.Command("go", "build", "-o", server, "github.com/modelcontextprotocol/go-sdk/conformance/everything-server")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the everything-server: %v\n%s", err, out)
	}
	for _, tc := range []struct {
		name, pkg string
		stateless bool
		stdio     bool // the server on stdio behind the sidecar, a child per session
		extra     []string
	}{
		{"0.1.16 stateful", "@modelcontextprotocol/conformance", false, false, nil},
		{"0.1.16 stdio child", "@modelcontextprotocol/conformance", false, true, nil},
		{"0.2.0-alpha 2026-07-28 stateless", "conformance-next", true, false, []string{"--spec-version", "2026-07-28"}},
		{"0.2.0-alpha 2026-07-28 stdio child", "conformance-next", true, true, []string{"--spec-version", "2026-07-28"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each its own server, sidecar and ports
			watchdog(t, 5*time.Minute)
			up, front := freePort(t), freePort(t)
			startBackground(t, server, "-http="+up, fmt.Sprintf("-stateless=%v", tc.stateless))
			if tc.stdio {
				startBackground(t, proxyBin, "--listen", front, "--log-level", "warn", "--", server)
			} else {
				startBackground(t, proxyBin, "--listen", front, "--upstream", "http://"+up+"/mcp", "--log-level", "warn")
			}
			waitListening(t, up)
			waitListening(t, front)
			runs := [][]string{tc.extra}
			if tc.stateless { // the header checks (SEP-2243), which the suite runs only when asked
				for _, sc := range []string{"http-header-validation", "http-custom-header-server-validation"} {
					runs = append(runs, append([]string{"--scenario", sc}, tc.extra...))
				}
			}
			for _, extra := range runs {
				directPassed, directFailed := conformance(t, node, dir, tc.pkg, fmt.Sprintf("http://%s/mcp", up), extra...)
				passed, failed := conformance(t, node, dir, tc.pkg, fmt.Sprintf("http://%s/mcp", front), extra...)
				t.Logf("%v: direct: %d passed, %d failed; through the sidecar: %d passed, %d failed", extra, directPassed, directFailed, passed, failed)
				if passed != directPassed || failed != 0 || directPassed == 0 {
					t.Errorf("%v: through the sidecar %d passed and %d failed; directly %d passed", extra, passed, failed, directPassed)
				}
			}
		})
	}
}

//go:build unix

package main

import (
	"cmp"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/strict"
)

// TestE2EStrictClientRandomCancels: a client as strict as Claude Code (it
// would close its connection over an answer it cannot place, a second
// answer, or progress under a token it does not hold) makes 1,000 calls of
// a slow tool, 16 at a time, and cancels about a third of them at random (at
// once, or at their first progress), through every transport the proxy has,
// against real servers: the go-sdk example server, server-everything (which
// ignores cancels: its call runs on, reporting progress, and answers),
// mcp-go (which sends a step's progress after its answer, and answers a
// cancelled call) and FastMCP (without cancels: python-sdk 1.29's session
// dies of them, its issue 2610, on stdio and HTTP+SSE alike). A single-stream client speaks through the
// wrapper, the bridge (to Streamable HTTP and to HTTP+SSE) and the sidecar's
// HTTP+SSE endpoints for old clients; a Streamable HTTP client, each call on
// a stream of its own, through the sidecar in front of Streamable HTTP,
// HTTP+SSE and stdio servers. Every call ends with one answer or one cancel;
// nothing else comes, but for an answer or progress already on its way when
// the cancel reached the proxy, counted apart; and the proxy says so at its
// end: it accepted each cancel but those whose call it had answered already
// (the raced ones), and dropped those.
func TestE2EStrictClientRandomCancels(t *testing.T) {
	t.Parallel()
	node, dir := nodePeers(t)
	everything := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	loopback := filepath.Join(sharedDir(t), "tools", "loopback.cjs")
	mcpgo := buildMcpGo(t)
	pyEnv, pyArgv := fastMCP(t)
	// Servers of their own on HTTP, given their address.
	goSDK := func(t *testing.T, addr string) {
		startServer(t, exec.Command(proxyBin, "example-server", "--http", addr))
	}
	everythingHTTP := func(t *testing.T, addr string) {
		_, port, _ := net.SplitHostPort(addr)
		startBackgroundEnv(t, []string{"PORT=" + port}, node, "--require", loopback, everything, "streamableHttp")
	}
	mcpgoHTTP := func(t *testing.T, addr string) { startBackground(t, mcpgo, "-http", addr) }
	fastMCPSSE := func(t *testing.T, addr string) {
		_, port, _ := net.SplitHostPort(addr)
		startBackgroundEnv(t, pyEnv, pyArgv[0], append(pyArgv[1:], "--sse", port)...)
	}
	for _, r := range []struct {
		name string
		up   func(t *testing.T, addr string) // an HTTP server, or
		path string                          // (its endpoint, if not /mcp)
		cmd  []string                        // a stdio server
		env  []string                        // its environment's additions
		http bool                            // a Streamable HTTP client of the sidecar, else
		old  bool                            // an HTTP+SSE client of the sidecar, else a stdio client
		call string
		calm bool // no cancels: the server's session dies of them
	}{
		{name: "wrapper", cmd: []string{proxyBin, "example-server"}, call: slowHonour},
		{name: "wrapper-to-server-everything", cmd: []string{node, everything, "stdio"}, call: longRunning},
		{name: "wrapper-to-mcp-go", cmd: []string{mcpgo}, call: slowTool},
		{name: "wrapper-to-fastmcp", cmd: pyArgv, env: pyEnv, call: slowTool, calm: true},
		{name: "bridge", up: goSDK, call: slowHonour},
		{name: "bridge-to-fastmcp-sse", up: fastMCPSSE, path: "/sse", call: slowTool, calm: true},
		{name: "sidecar-to-streamable", up: goSDK, http: true, call: slowHonour},
		{name: "sidecar-to-server-everything", up: everythingHTTP, http: true, call: longRunning},
		{name: "sidecar-to-mcp-go", up: mcpgoHTTP, http: true, call: slowUntracked},
		{name: "sidecar-to-fastmcp-sse", up: fastMCPSSE, path: "/sse", http: true, call: slowTool, calm: true},
		{name: "sidecar-to-stdio", cmd: []string{proxyBin, "example-server"}, http: true, call: slowHonour},
		{name: "old-client-to-streamable", up: goSDK, old: true, call: slowHonour},
		{name: "old-client-to-stdio", cmd: []string{proxyBin, "example-server"}, old: true, call: slowHonour},
	} {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			var args []string
			if r.http || r.old {
				args = []string{"--listen", freePort(t), "--cancel-grace", "50ms"}
			}
			if r.up != nil {
				addr := freePort(t)
				r.up(t, addr)
				waitListening(t, addr)
				args = append(args, "--upstream", "http://"+addr+cmp.Or(r.path, "/mcp"))
			} else {
				args = append(append(args, "--"), r.cmd...)
			}
			cmd := exec.Command(proxyBin, args...)
			cmd.Env = append(os.Environ(), r.env...)
			p := startCommand(t, cmd)
			load := strictLoad(r.call, !r.calm)
			if !r.http && !r.old {
				p.initialize(`{}`)
				got, err := strict.Stream(wrappedConn{p}, load)
				strictCheck(t, got, err, p.events)
				return
			}
			p.events.waitFor(t, events.SidecarListening)
			url := "http://" + args[1] + "/mcp"
			if r.http {
				got, err := strict.HTTP(url, openSession(t, url, "strict"), load)
				strictCheck(t, got, err, p.events)
				return
			}
			old, err := strict.OpenLegacy("http://" + args[1])
			if err != nil {
				t.Fatal(err)
			}
			defer old.Close()
			if err := strict.Initialize(old, "2024-11-05"); err != nil {
				t.Fatal(err)
			}
			got, err := strict.Stream(old, load)
			strictCheck(t, got, err, p.events)
		})
	}
}

// The calls of TestE2EStrictClientRandomCancels, given their id twice: the
// go-sdk example server's slow_honour, server-everything's long-running
// operation, and mcp-go's and FastMCP's slow, each 10 ms long in two steps of
// progress.
const (
	slowHonour  = `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"slow_honour","arguments":{"seconds":0.01,"steps":2},"_meta":{"progressToken":"t%d"}}}`
	longRunning = `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"trigger-long-running-operation","arguments":{"duration":0.01,"steps":2},"_meta":{"progressToken":"t%d"}}}`
	slowTool    = `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"slow","arguments":{"seconds":0.01,"steps":2},"_meta":{"progressToken":"t%d"}}}`
	// Without a progress token (so the id once, %[1]d): mcp-go's
	// Streamable HTTP server sends a call's progress on whichever of the
	// session's streams it finds (measured without the proxy), and the
	// sidecar relays each stream as it comes.
	slowUntracked = `{"jsonrpc":"2.0","id":%[1]d,"method":"tools/call","params":{"name":"slow","arguments":{"seconds":0.01,"steps":2}}}`
)

// strictLoad is TestE2EStrictClientRandomCancels's load: 1,000 calls, 16 at
// a time; 250 without cancels (FastMCP's runs: its server handles about 25
// calls a second here, so 1,000 took 44 s of the suite's two cores, close
// to a proxy's 60 s watchdog on a busy machine, and cancels are not what
// those runs check).
func strictLoad(call string, cancels bool) strict.Load {
	n := 1000
	if !cancels {
		n = 250
	}
	return strict.Load{Calls: n, Window: 16, Call: call, Cancels: cancels, Seed: 41}
}

// strictCheck fails t if the strict client would have closed its
// connection, or if the proxy (its events feed) did not accept every
// cancel but the raced ones.
func strictCheck(t *testing.T, got strict.Tally, err error, feed *eventTail) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	feed.waitCount(t, got.Accepted(), events.CancelAccepted, "from", "client")
	if n := feed.count(events.CancelAccepted, "from", "client"); n != got.Accepted() {
		t.Errorf("the proxy accepted %d cancels, want %d: %v", n, got.Accepted(), got)
	}
	t.Log(got)
}

// wrappedConn is the proxy's stdio, as a strict client's connection.
type wrappedConn struct{ w *wrapped }

func (c wrappedConn) Send(frame string) error       { c.w.send(frame); return nil }
func (c wrappedConn) Recv() (map[string]any, error) { return c.w.recv(), nil }

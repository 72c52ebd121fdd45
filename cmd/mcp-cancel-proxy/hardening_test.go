//go:build unix

package main

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/config"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// blankLineServer is a real stdio server (a shell loop) that follows every
// answer with an empty line, as print(json_text + "\n") does.
var blankLineServer = []string{"sh", "-c",
	`while IFS= read -r l; do printf '%s\n\n' '{"jsonrpc":"2.0","id":"init","result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"blank","version":"1"}}}'; done`}

// TestE2EBlankLinesHoldNothingBack: a client that ends its frame with a
// blank line, and a server that does the same, are each answered without
// sending anything more (issue 8, item 1).
func TestE2EBlankLinesHoldNothingBack(t *testing.T) {
	t.Parallel()
	w := startWrapped(t, append([]string{"--"}, blankLineServer...)...)
	w.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}` + "\n")
	w.recvUntil(isResponse("init"))
}

// sharedDir returns the workplace's shared folder beside the repository
// (the Python SDK, loopback.cjs), skipping the test without it, except
// under CI, where it must be there.
func sharedDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../../../shared")
	if err == nil {
		_, err = os.Stat(filepath.Join(dir, "PEERS.md"))
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("../shared is missing beside the repository: %v", err)
		}
		t.Skip("../shared is not beside the repository")
	}
	return dir
}

// buildMcpGo builds the mcp-go example server.
func buildMcpGo(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mcpgoserver")
	if out, err := exec.Command("go", "build", "-o", bin, "../../examples/mcpgoserver").CombinedOutput(); err != nil {
		t.Fatalf("building the mcp-go server: %v\n%s", err, out)
	}
	return bin
}

// TestE2EGoSDKClient2025ThroughSilentServers: server-everything and mcp-go
// send no event on a fresh GET stream, only its headers; the go-sdk client
// speaking 2025-11-25 waits for those headers before it sends
// notifications/initialized. Through the sidecar, upstream and as stdio
// children, it must connect and call a tool (issue 8, item A).
func TestE2EGoSDKClient2025ThroughSilentServers(t *testing.T) {
	t.Parallel()
	node, dir := nodePeers(t)
	loopback := filepath.Join(sharedDir(t), "tools", "loopback.cjs")
	everything := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	mcpgo := buildMcpGo(t)
	type target struct {
		name     string
		upstream func(addr string) // starts an HTTP server on addr, if the sidecar relays to one
		path     string            // the upstream's endpoint, if not /mcp
		flags    []string          // more of the sidecar's flags
		child    []string          // else the stdio server the sidecar runs
		tool     string
	}
	targets := []target{
		{name: "mcp-go upstream", tool: "wait_for_cancel", upstream: func(addr string) { startBackground(t, mcpgo, "-http", addr) }},
		{name: "server-everything upstream", tool: "echo", upstream: func(addr string) {
			_, port, _ := net.SplitHostPort(addr)
			startBackgroundEnv(t, []string{"PORT=" + port}, node, "--require", loopback, everything, "streamableHttp")
		}},
		{name: "server-everything HTTP+SSE upstream", tool: "echo", path: "/sse", flags: []string{"--upstream-transport", "sse"},
			upstream: func(addr string) {
				_, port, _ := net.SplitHostPort(addr)
				startBackgroundEnv(t, []string{"PORT=" + port}, node, "--require", loopback, everything, "sse")
			}},
		{name: "mcp-go HTTP+SSE upstream", tool: "wait_for_cancel", path: "/sse",
			upstream: func(addr string) { startBackground(t, mcpgo, "-sse", addr) }},
		{name: "mcp-go child", tool: "wait_for_cancel", child: []string{mcpgo}},
		{name: "server-everything child", tool: "echo", child: []string{node, everything, "stdio"}},
	}
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			watchdog(t, 60*time.Second)
			front := freePort(t)
			args := append([]string{"--listen", front, "--log-level", "debug"}, tg.flags...)
			if tg.upstream != nil {
				up := freePort(t)
				tg.upstream(up)
				waitListening(t, up)
				args = append(args, "--upstream", "http://"+up+cmp.Or(tg.path, "/mcp"))
			} else {
				args = append(append(args, "--"), tg.child...)
			}
			sidecar := startWrapped(t, args...)
			sidecar.events.waitFor(t, events.SidecarListening)
			t.Cleanup(func() { sidecar.cmd.Process.Signal(syscall.SIGTERM) })

			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
			cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + front + "/mcp"},
				&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
			if err != nil {
				t.Fatalf("connecting through the sidecar: %v", err)
			}
			defer cs.Close()
			tools, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, tl := range tools.Tools {
				found = found || tl.Name == tg.tool
			}
			if !found {
				t.Errorf("tools/list through the sidecar lacks %q", tg.tool)
			}
		})
	}
}

// fastMCP unpacks the Python SDK from ../shared and returns the
// environment and the command line that run its FastMCP test server (on
// stdio; add "--http PORT" for Streamable HTTP).
func fastMCP(t *testing.T) (env []string, argv []string) {
	t.Helper()
	peer := filepath.Join(sharedDir(t), "peers", "python-mcp")
	site := t.TempDir()
	untar := exec.Command("tar", "xzf", filepath.Join(peer, "python-mcp-1.29.0-site.tar.gz"), "-C", site)
	if out, err := untar.CombinedOutput(); err != nil {
		t.Fatalf("unpacking the Python SDK: %v\n%s", err, out)
	}
	return []string{"PYTHONPATH=" + filepath.Join(site, "site")}, []string{"python3", filepath.Join(peer, "fastmcp_server.py")}
}

// TestE2EFastMCPThroughSidecar: FastMCP over Streamable HTTP (uvicorn sends
// lower-case header names; the 2026 probe gets HTTP 400 with the id
// "server-error"). The go-sdk client connects through the sidecar, falls
// back to initialize as it does directly, and its cancel reaches the server
// (issue 8, items B and C).
func TestE2EFastMCPThroughSidecar(t *testing.T) {
	t.Parallel()
	fastMCPThroughSidecar(t, "--http", "/mcp")
}

// TestE2EFastMCPOverSSEThroughSidecar: the same, with FastMCP serving the
// 2024-11-05 HTTP+SSE transport behind the sidecar, which finds that out
// itself (http.upstream_transport auto, the default): the client's cancel
// is POSTed to the server's message endpoint.
func TestE2EFastMCPOverSSEThroughSidecar(t *testing.T) {
	t.Parallel()
	fastMCPThroughSidecar(t, "--sse", "/sse")
}

// startFastMCP starts FastMCP serving HTTP in a mode (--http, --sse) and
// returns its address and its log lines.
func startFastMCP(t *testing.T, mode string) (addr string, logs *logTail) {
	env, argv := fastMCP(t)
	addr = freePort(t)
	_, port, _ := net.SplitHostPort(addr)
	py := exec.Command(argv[0], append(argv[1:], mode, port)...)
	py.Env = append(os.Environ(), env...)
	stderr, _ := py.StderrPipe()
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	logs = newLogTail(stderr)
	t.Cleanup(func() {
		py.Process.Kill()
		py.Wait()
		if t.Failed() {
			t.Logf("FastMCP stderr:\n%s", logs.all())
		}
	})
	waitListening(t, addr)
	return addr, logs
}

// TestE2EStdioClientToFastMCPOverSSE: a stdio client through the bridge
// (--upstream without --listen) to FastMCP on HTTP+SSE, found out by the
// probe: the cancel reaches the server, nothing late reaches the client.
func TestE2EStdioClientToFastMCPOverSSE(t *testing.T) {
	t.Parallel()
	watchdog(t, 60*time.Second)
	up, pyLogs := startFastMCP(t, "--sse")
	w := startWrapped(t, "--log-level", "debug", "--upstream", "http://"+up+"/sse")
	w.initialize(`{}`)
	w.events.waitFor(t, events.UpstreamDetected, "transport", "sse")
	w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow","arguments":{"seconds":30,"steps":300},"_meta":{"progressToken":"py"}}}`)
	w.recvUntil(func(m map[string]any) bool { return concerns(m, "none", "py") })
	w.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"test"}}`)
	pyLogs.waitFor(t, "slow: CANCELLED")
	w.send(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"message":"after"}}}`)
	assertNothingAfter(t, w.recvUntil(isResponse(3)), 2, "py")
}

// fastMCPThroughSidecar runs FastMCP in a mode (--http, --sse) behind the
// sidecar, and a go-sdk client cancels a long call through it: the server
// hears the cancel, the client gets nothing late, and the session goes on.
func fastMCPThroughSidecar(t *testing.T, mode, path string, flags ...string) {
	watchdog(t, 60*time.Second)
	up, pyLogs := startFastMCP(t, mode)
	front := freePort(t)
	sidecar := startWrapped(t, append([]string{"--listen", front, "--upstream", "http://" + up + path, "--log-level", "debug"}, flags...)...)
	sidecar.events.waitFor(t, events.SidecarListening)
	t.Cleanup(func() { sidecar.cmd.Process.Signal(syscall.SIGTERM) })

	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	progressed := make(chan struct{}, 16)
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progressed <- struct{}{} },
	})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + front + "/mcp"}, nil)
	if err != nil {
		t.Fatalf("connecting through the sidecar: %v", err)
	}
	defer cs.Close()
	if mode == "--sse" { // the client's session is a session of the upstream's
		sidecar.events.waitFor(t, events.UpstreamDetected, "transport", "sse")
		sidecar.events.waitFor(t, events.UpstreamSessionOpened)
	} else {
		sidecar.events.waitFor(t, events.SessionOpened)
	}
	callCtx, stop := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		params := &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{"seconds": 30, "steps": 300}}
		params.SetProgressToken("py-tok")
		_, err := cs.CallTool(callCtx, params)
		errc <- err
	}()
	<-progressed
	stop()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("CallTool after cancel = %v, want context.Canceled", err)
	}
	sidecar.events.waitFor(t, events.CancelAccepted)
	pyLogs.waitFor(t, "slow: CANCELLED") // the server heard the cancel
	if r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": "after"}}); err != nil || r.IsError {
		t.Fatalf("a call after the cancel: %v %+v", err, r)
	}
}

// TestCommandLineSaysWhatIsWrong: help, version, and command lines that
// cannot work each say so in words (issue 8, item 19).
func TestCommandLineSaysWhatIsWrong(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args       []string
		code       int
		out, err   string
		notInError string
	}{
		{args: []string{"help"}, code: 0, out: "--listen ADDR [flags] -- COMMAND"},
		{args: []string{"version"}, code: 0, out: "mcp-cancel-proxy "},
		{args: []string{"--version"}, code: 0, out: "mcp-cancel-proxy "},
		{args: nil, code: exitUsage, err: "no server command"},
		{args: []string{"--upstream", "http://127.0.0.1:1/mcp", "--", "node", "server.js"}, code: exitUsage, err: "give either --upstream or a server command"},
		{args: []string{"--help"}, code: 0, out: "requests without an Origin header are always accepted", notInError: "besides none"},
		// issue 39, item 7: check in the usage, typos of check and auth,
		// the size as given, the help of --upstream and --admin
		{args: []string{"--help"}, code: 0, out: "mcp-cancel-proxy check [flags] --tool NAME"},
		{args: []string{"--help"}, code: 0, out: "alone, the HTTP server the bridge relays its stdio client to"},
		{args: []string{"--help"}, code: 0, out: "/healthz, /readyz, /metrics, /status, /events and /hooks"},
		{args: []string{"chekc", "--tool", "x"}, code: exitUsage, err: "did you mean check?"},
		{args: []string{"atuh", "list"}, code: exitUsage, err: "did you mean auth?"},
		{args: []string{"--max-frame-size", "10XB", "--", "true"}, code: exitUsage, err: `invalid size "10XB"`},
	}
	for _, tt := range tests {
		var stdout, stderr strings.Builder
		code := run(context.Background(), tt.args, io.NopCloser(strings.NewReader("")), nopWriteCloser{&stdout}, &stderr)
		if code != tt.code || !strings.Contains(stdout.String(), tt.out) || !strings.Contains(stderr.String(), tt.err) ||
			(tt.notInError != "" && strings.Contains(stderr.String(), tt.notInError)) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q", tt.args, code,
				stdout.String(), stderr.String(), tt.code, tt.out, tt.err)
		}
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// TestValidateTellsEveryProblem: validate reports every problem at once, as
// FILE:LINE:COLUMN: setting: problem in plain words, including what the
// proxy would refuse at start (issue 8, item 18).
func TestValidateTellsEveryProblem(t *testing.T) {
	t.Parallel()
	cfg := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(cfg, []byte("limits:\n  max_frame_size: 12zz\n  retire_max: -3\nhttp:\n  listen: 127.0.0.1:99999\n"+
		"  upstream: ftp://x\n  cancel_grace: soon\nlog:\n  colour: red\n"), 0o600)
	var stdout, stderr strings.Builder
	if code := validate([]string{cfg}, &stdout, &stderr); code != 1 {
		t.Errorf("validate: exit %d, want 1", code)
	}
	for _, want := range []string{
		cfg + `:2:19: limits.max_frame_size: invalid size "12zz"`,
		cfg + `:3:3: limits.retire_max: unknown setting "retire_max"`,
		cfg + `:5:3: http.listen: "127.0.0.1:99999": port "99999" is not a number from 0 to 65535`,
		cfg + `:6:3: http.upstream: "ftp://x": the scheme must be http or https`,
		cfg + `:7:17: http.cancel_grace: "soon" is not a duration such as 500ms, 30s or 5m`,
		cfg + `:9:3: log.colour: unknown setting "colour"`,
	} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("validate's report lacks %q:\n%s", want, stderr.String())
		}
	}
	alone := filepath.Join(t.TempDir(), "alone.yaml") // an upstream alone: stdio to HTTP
	os.WriteFile(alone, []byte("http:\n  upstream: http://127.0.0.1:1/mcp\n"), 0o600)
	stderr.Reset()
	if code := validate([]string{alone}, &stdout, &stderr); code != 0 {
		t.Errorf("an upstream without a listen address: exit %d, %q", code, stderr.String())
	}
}

// TestE2EShutdownCancelsInFlight: SIGTERM to the wrapper with a call in
// flight cancels it on the server first, with source "shutdown": its
// on_cancel hook runs within hooks.shutdown_wait, its audit line is
// written, and the client gets -32000 (issue 8, item 7).
func TestE2EShutdownCancelsInFlight(t *testing.T) {
	t.Parallel()
	cfg, dir := writeConfig(t, hookConfig)
	w := startWrapped(t, "--config", cfg, "--log-level", "debug", "--", proxyBin, "example-server")
	w.initialize(`{}`)
	w.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"block","arguments":{"key":"job-9"},"_meta":{"progressToken":"p"}}}`)
	w.recvUntil(func(m map[string]any) bool { return concerns(m, 1, "p") })
	w.cmd.Process.Signal(syscall.SIGTERM)
	answer := w.recvUntil(isResponse(1))
	if e, _ := answer[len(answer)-1]["error"].(map[string]any); e == nil || e["code"] != float64(-32000) {
		t.Errorf("the call in flight was answered %v, want error -32000", answer[len(answer)-1])
	}
	w.events.waitFor(t, events.CancelAccepted, "reason", "the proxy is shutting down")
	w.events.waitFor(t, events.HookRan, "phase", "on_cancel")
	if ev := readEvent(t, filepath.Join(dir, "cancel.json")); ev["source"] != "shutdown" {
		t.Errorf("on_cancel event: %v, want source shutdown", ev)
	}
	if rec := auditLine(t, w.logs, "1", "upstream notified; compensating hook ran"); rec["source"] != "shutdown" {
		t.Errorf("audit: %v", rec)
	}
	w.wait()
}

// deafServer answers initialize, then never reads its stdin again.
var deafServer = []string{"sh", "-c", `read l; printf '%s\n' '{"jsonrpc":"2.0","id":"init","result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"deaf","version":"1"}}}'; exec sleep 600`}

// TestE2EServerThatStopsReadingIsStopped: with more queued for a server
// than the proxy holds, and the server not reading, the client's EOF and
// SIGTERM still start the stop ladder, and the proxy exits (issue 8, item 8).
func TestE2EServerThatStopsReadingIsStopped(t *testing.T) {
	t.Parallel()
	big := `{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"` + strings.Repeat("x", 6<<20) + `"}}`
	for _, how := range []string{"client EOF", "SIGTERM"} {
		t.Run(how, func(t *testing.T) {
			w := startWrapped(t, append([]string{"--term-after", "200ms", "--kill-after", "200ms", "--"}, deafServer...)...)
			w.initialize(`{}`)
			for _, note := range []string{big, big, `{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"x"}}`} {
				w.send(note) // the last one waits for room the server never makes
			}
			if how == "SIGTERM" {
				w.cmd.Process.Signal(syscall.SIGTERM)
			} else {
				w.stdin.Close()
			}
			w.events.waitFor(t, events.ServerExited)
			w.wait()
		})
	}
}

// TestRepeatedWarningsAreSampled: a warning that repeats (a peer
// misbehaving in a loop) is written ten times a second at most, then one in
// a hundred; debug and info lines are never dropped (issue 8, item 15).
func TestRepeatedWarningsAreSampled(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	log := newLogger(config.Log{Level: "debug", Format: "json"}, &out, nil)
	for range 300 {
		log.Warn("malformed message dropped")
		log.Debug("suppressed")
	}
	log.Sync()
	warns, debugs := strings.Count(out.String(), "malformed message dropped"), strings.Count(out.String(), `"suppressed"`)
	if warns < 10 || warns > 13 || debugs != 300 {
		t.Errorf("%d warnings and %d debug lines written of 300 each; want 10 to 13, and 300", warns, debugs)
	}
}

// TestE2EReloadOnFileChange: the policy follows its file without a signal
// (Windows has none; a Kubernetes ConfigMap changes files without one): an
// editor's rename-and-replace and a ConfigMap's symlink swap are both seen,
// an invalid file is refused and the policy in force stays (issue 9, item 5).
func TestE2EReloadOnFileChange(t *testing.T) {
	t.Parallel()
	const (
		invalid = "policy:\n  rules:\n    - tool: block\n      timeout: -5s\n"
		valid   = "policy:\n  rules:\n    - tool: block\n      timeout: 200ms\n"
	)
	write := func(path, text string) {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const initial = "policy:\n  rules:\n    - tool: block\n      timeout: 10m\n"
	changes := map[string]struct {
		mount  func(t *testing.T, text string) string // a folder holding config.yaml
		change func(t *testing.T, dir, text string)
	}{
		// An editor: write a temporary file, rename it over the target.
		"editor": {
			func(t *testing.T, text string) string {
				dir := t.TempDir()
				write(filepath.Join(dir, "config.yaml"), text)
				return dir
			},
			func(t *testing.T, dir, text string) {
				write(filepath.Join(dir, "config.yaml.tmp"), text)
				os.Rename(filepath.Join(dir, "config.yaml.tmp"), filepath.Join(dir, "config.yaml"))
			},
		},
		// The kubelet's ConfigMap volume (kubeletMount, kubeletUpdate).
		"configmap": {kubeletMount, kubeletUpdate},
	}
	for name, c := range changes {
		t.Run(name, func(t *testing.T) {
			dir := c.mount(t, initial)
			w := startWrapped(t, "--config", filepath.Join(dir, "config.yaml"), "--log-level", "debug", "--", proxyBin, "example-server")
			w.initialize(`{}`)
			c.change(t, dir, invalid)
			w.events.waitFor(t, events.PolicyKept, "why", "the configuration file changed")
			c.change(t, dir, valid)
			w.events.waitFor(t, events.PolicyReloaded) // once the new policy is in force
			w.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"block","arguments":{"key":"f"}}}`)
			got := w.recvUntil(isResponse(1))
			if e, _ := got[len(got)-1]["error"].(map[string]any); e == nil || e["code"] != float64(-32001) {
				t.Errorf("a call under the reloaded policy: %v", got[len(got)-1])
			}
		})
	}
}

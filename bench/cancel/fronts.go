//go:build linux

package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/bench/internal/nodepeers"
)

// transport is one way a cancel travels: the server's kind and the
// fronts that carry a client to it, the proxy among them.
type transport struct {
	name   string
	server string // "stdio": a child of the front; "http": a process of its own
	path   string // the HTTP server's endpoint: /mcp (Streamable HTTP) or /sse
	grace  string // the proxy's http.cancel_grace
	fronts []front
}

// front is what stands between the client and the server: nothing
// (direct), the proxy or a peer.
type front struct {
	name   string
	client string // stdio, http (2025-11-25), modern (2026-07-28) or legacy (HTTP+SSE)
	start  func(e *env) (*running, error)
}

// env is what a front starts with: the binaries, and the server's means.
type env struct {
	self, proxy, node, nodeDir, dir string
	stamps                          string // the server's stamps socket
	upstream                        string // the HTTP server's URL
	grace                           string
	events                          string // the proxy's events feed
	noEvents                        bool   // the proxy runs without one
	problems                        int    // fronts not started, and runs with failed calls
	long                            time.Duration
}

// running is a started front: how the client reaches it, and what to
// stop after.
type running struct {
	stdin  io.WriteCloser // a stdio client's
	stdout io.Reader
	url    string // an HTTP client's
	procs  []*exec.Cmd
	events string // the proxy's events feed, else ""
}

func (r *running) stop() {
	if r.stdin != nil {
		r.stdin.Close()
	}
	for _, p := range r.procs {
		stopProcess(p)
	}
}

var transports = []transport{
	{name: "wrapper", server: "stdio", fronts: []front{
		{"direct", "stdio", stdioDirect},
		{"proxy", "stdio", func(e *env) (*running, error) {
			return e.stdioFront(e.proxyArgs(append([]string{"--"}, e.serverArgv()...)...))
		}},
	}},
	{name: "bridge", server: "http", path: "/mcp", fronts: []front{
		{"direct", "http", httpDirect},
		{"proxy", "stdio", func(e *env) (*running, error) { return e.stdioFront(e.proxyArgs("--upstream", e.upstream)) }},
		{"mcp-remote", "stdio", func(e *env) (*running, error) {
			return e.stdioFront(append([]string{e.node, e.remote()}, e.upstream, "--transport", "http-only"))
		}},
		{"supergateway", "stdio", func(e *env) (*running, error) {
			return e.stdioFront([]string{e.node, e.supergateway(), "--streamableHttp", e.upstream, "--logLevel", "none"})
		}},
	}},
	{name: "sidecar-2025", server: "http", path: "/mcp", grace: "0s", fronts: []front{
		{"direct", "http", httpDirect},
		{"proxy", "http", sidecar("/mcp", "--upstream")},
	}},
	{name: "sidecar-2025-grace", server: "http", path: "/mcp", grace: "500ms", fronts: []front{
		{"proxy", "http", sidecar("/mcp", "--upstream")},
	}},
	{name: "sidecar-2026", server: "http", path: "/mcp", grace: "0s", fronts: []front{
		{"direct", "modern", httpDirect},
		{"proxy", "modern", sidecar("/mcp", "--upstream")},
	}},
	{name: "sidecar-to-sse", server: "http", path: "/sse", grace: "0s", fronts: []front{
		{"direct", "legacy", httpDirect},
		{"proxy", "http", sidecar("/mcp", "--upstream")},
	}},
	{name: "stdio-over-http", server: "stdio", grace: "0s", fronts: []front{
		{"direct", "stdio", stdioDirect},
		{"proxy", "http", sidecar("/mcp", "--")},
		{"supergateway", "http", supergatewayFront("streamableHttp", "/mcp")},
		{"mcp-proxy", "http", mcpProxyFront("stream", "/mcp")},
	}},
	{name: "legacy-front", server: "stdio", grace: "0s", fronts: []front{
		{"direct", "stdio", stdioDirect},
		{"proxy", "legacy", sidecar("/sse", "--")},
		{"supergateway", "legacy", supergatewayFront("sse", "/sse")},
		{"mcp-proxy", "legacy", mcpProxyFront("sse", "/sse")},
	}},
}

func stdioDirect(e *env) (*running, error) { return e.stdioFront(e.serverArgv()) }

func httpDirect(e *env) (*running, error) { return &running{url: e.upstream}, nil }

// sidecar runs the proxy's HTTP front at path; how says what is behind
// it: --upstream (the HTTP server), or -- (the stdio server as its child).
func sidecar(path, how string) func(e *env) (*running, error) {
	return func(e *env) (*running, error) {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		args := []string{"--listen", addr, "--cancel-grace", e.grace}
		if how == "--" {
			args = append(args, append([]string{"--"}, e.serverArgv()...)...)
		} else {
			args = append(args, how, e.upstream)
		}
		events := e.events
		if e.noEvents {
			events = ""
		}
		return e.httpFront(e.proxyArgs(args...), addr, path, events)
	}
}

func supergatewayFront(output, path string) func(e *env) (*running, error) {
	return func(e *env) (*running, error) {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		_, port, _ := net.SplitHostPort(addr)
		cmd := ""
		for i, a := range e.serverArgv() {
			if i > 0 {
				cmd += " "
			}
			cmd += strconv.Quote(a)
		}
		args := []string{e.node, "--require", filepath.Join(e.dir, "loopback.cjs"), e.supergateway(), "--stdio", cmd,
			"--outputTransport", output, "--port", port, "--logLevel", "none"}
		if output == "streamableHttp" {
			args = append(args, "--stateful")
		}
		return e.httpFront(args, addr, path, "")
	}
}

func mcpProxyFront(server, path string) func(e *env) (*running, error) {
	return func(e *env) (*running, error) {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		_, port, _ := net.SplitHostPort(addr)
		args := append([]string{e.node, filepath.Join(e.nodeDir, "mcp-proxy", "dist", "bin", "mcp-proxy.mjs"),
			"--host", "127.0.0.1", "--port", port, "--server", server, "--"}, e.serverArgv()...)
		return e.httpFront(args, addr, path, "")
	}
}

func (e *env) serverArgv() []string {
	return []string{e.self, "-role", "stdio-server", "-stamps", e.stamps}
}

func (e *env) remote() string { return filepath.Join(e.nodeDir, "mcp-remote", "dist", "proxy.js") }

func (e *env) supergateway() string {
	return filepath.Join(e.nodeDir, "supergateway", "dist", "index.js")
}

// proxyArgs is the proxy's command line: quiet but for its events feed
// (unless -events=false).
func (e *env) proxyArgs(args ...string) []string {
	argv := []string{e.proxy, "--config", filepath.Join(e.dir, "proxy.yaml")}
	if e.noEvents {
		return append(argv, args...)
	}
	return append(append(argv, "--events", e.events), args...)
}

// stdioFront starts argv with its stdin and stdout as the client's pipes.
func (e *env) stdioFront(argv []string) (*running, error) {
	cmd := command(e, argv)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &running{stdin: in, stdout: out, procs: []*exec.Cmd{cmd}}
	if argv[0] == e.proxy && !e.noEvents {
		r.events = e.events
	}
	return r, nil
}

// httpFront starts argv and waits for it to listen on addr.
func (e *env) httpFront(argv []string, addr, path, events string) (*running, error) {
	cmd := command(e, argv)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &running{url: "http://" + addr + path, procs: []*exec.Cmd{cmd}, events: events}
	if err := waitListening(addr); err != nil {
		r.stop()
		return nil, fmt.Errorf("%s: %w", filepath.Base(argv[0]), err)
	}
	return r, nil
}

// command is argv in its own process group (killed with the driver), its
// stderr the driver's, in a home of its own (mcp-remote keeps state there).
func command(e *env, argv []string) *exec.Cmd {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL} // none outlives a killed driver
	cmd.Env = append(os.Environ(), "HOME="+e.dir, "MCP_REMOTE_CONFIG_DIR="+filepath.Join(e.dir, "mcp-remote"))
	return cmd
}

// startServer starts the HTTP server of a transport whose server is one.
func (e *env) startServer(path string) (*exec.Cmd, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cmd := command(e, []string{e.self, "-role", "http-server", "-addr", addr, "-stamps", e.stamps})
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if err := waitListening(addr); err != nil {
		stopProcess(cmd)
		return nil, err
	}
	e.upstream = "http://" + addr + path
	return cmd, nil
}

// stopProcess ends a process group: SIGTERM, then SIGKILL after 5 s.
func stopProcess(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitListening waits up to 30 s for addr to accept a connection.
func waitListening(addr string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listens on %s after 30s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writeSupport writes the proxy's configuration and the Node preload
// that keeps supergateway on loopback.
func (e *env) writeSupport() error {
	cfg := "audit:\n  path: off\nlog:\n  level: warn\n"
	if err := os.WriteFile(filepath.Join(e.dir, "proxy.yaml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(e.dir, "loopback.cjs"), []byte(nodepeers.LoopbackHook), 0o644)
}

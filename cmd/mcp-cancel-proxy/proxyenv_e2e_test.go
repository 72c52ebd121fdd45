package main

import (
	"bufio"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// connectProxy is an HTTP CONNECT proxy on loopback that tunnels to the
// host it is asked for, a name that only it resolves (to 127.0.0.1), and
// notes every tunnel.
type connectProxy struct {
	addr    string
	mu      sync.Mutex
	tunnels []string
}

func startConnectProxy(t *testing.T) *connectProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &connectProxy{addr: ln.Addr().String()}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *connectProxy) serve(c net.Conn) {
	defer c.Close()
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil || req.Method != http.MethodConnect {
		io.WriteString(c, "HTTP/1.1 405 Method Not Allowed\r\n\r\n")
		return
	}
	p.mu.Lock()
	p.tunnels = append(p.tunnels, req.Host)
	p.mu.Unlock()
	_, port, _ := net.SplitHostPort(req.Host)
	up, err := net.Dial("tcp", "127.0.0.1:"+port)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
		return
	}
	defer up.Close()
	io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	go io.Copy(up, c)
	io.Copy(c, up)
}

func (p *connectProxy) seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.tunnels...)
}

// bridgeLists runs the bridge with env and args, initializes, lists the
// tools, and reports whether that worked.
func bridgeLists(t *testing.T, env []string, args ...string) bool {
	cmd := exec.Command(proxyBin, append(args, "--upstream-transport", "streamable", "--log-level", "debug")...)
	cmd.Env = append(os.Environ(), env...)
	w := startCommand(t, cmd)
	w.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"p","version":"1"}}}`)
	got := w.recvUntil(isResponse(float64(1)))
	if got[len(got)-1]["result"] == nil {
		return false
	}
	w.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	got = w.recvUntil(isResponse(float64(2)))
	return strings.Contains(fmt.Sprint(got[len(got)-1]["result"]), "slow_honour")
}

// TestE2EBridgeThroughHTTPProxy: the bridge reaches its upstream through
// the proxy HTTP_PROXY names (a real CONNECT tunnel, to a name only the
// proxy resolves), never for a loopback upstream, and trusts a private
// CA given with --ca-file (and only then).
func TestE2EBridgeThroughHTTPProxy(t *testing.T) {
	t.Parallel()
	watchdog(t, 90e9)
	target := exampleUpstream(t, "--http")
	up := target.Host
	gw := gatewayTo(t, target, false) // reached by the name the proxy resolves; closed after the bridges
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(gw.URL, "http://"))
	p := startConnectProxy(t)
	env := []string{"HTTP_PROXY=http://" + p.addr, "HTTPS_PROXY=http://" + p.addr, "NO_PROXY="}
	if !bridgeLists(t, env, "--upstream", "http://mcp.test:"+port+"/mcp") {
		t.Fatal("the bridge through the proxy did not list the tools")
	}
	if got := p.seen(); len(got) == 0 || got[0] != "mcp.test:"+port {
		t.Errorf("the proxy tunnelled %v, want mcp.test:%s", got, port)
	}
	before := len(p.seen())
	if !bridgeLists(t, env, "--upstream", "http://"+up+"/mcp") || len(p.seen()) != before {
		t.Errorf("a loopback upstream: tunnels %v (before %d), want none more and the tools listed", p.seen(), before)
	}

	tlsUp := gatewayTo(t, target, true)
	ca := caFileOf(t, tlsUp)
	if !bridgeLists(t, nil, "--upstream", tlsUp.URL+"/mcp", "--ca-file", ca) {
		t.Error("the bridge to a private-CA upstream with --ca-file did not list the tools")
	}
	if bridgeLists(t, nil, "--upstream", tlsUp.URL+"/mcp") {
		t.Error("the bridge trusted a private CA it was not given")
	}
}

// TestE2ESidecarTrustsCAFile: the sidecar in front of an upstream whose
// TLS certificate a private CA signed, Streamable HTTP or HTTP+SSE,
// reaches it when --ca-file names the CA (http.ca_file), and only then, as
// the bridge does: the client of the upstream is made in one place for
// all. Before, the sidecar ignored the file.
func TestE2ESidecarTrustsCAFile(t *testing.T) {
	t.Parallel()
	watchdog(t, 90e9)
	for _, c := range []struct{ transport, flag, path string }{{"streamable", "--http", "/mcp"}, {"sse", "--sse", "/sse"}} {
		tlsUp := gatewayTo(t, exampleUpstream(t, c.flag), true)
		ca := caFileOf(t, tlsUp)
		for _, trusted := range []bool{true, false} {
			if reached, answer := sidecarReaches(t, tlsUp.URL+c.path, c.transport, trusted, ca); reached != trusted {
				t.Errorf("%s upstream, --ca-file given: %v; initialize through the sidecar: %s", c.transport, trusted, answer)
			}
		}
	}
}

// sidecarReaches starts a sidecar in front of upstream (with --ca-file ca
// if trusted) and reports whether an initialize through it is answered by
// the server, and the answer.
func sidecarReaches(t *testing.T, upstream, transport string, trusted bool, ca string) (bool, string) {
	t.Helper()
	front := freePort(t)
	args := []string{"--listen", front, "--upstream", upstream, "--upstream-transport", transport}
	if trusted {
		args = append(args, "--ca-file", ca)
	}
	sc := startCommand(t, exec.Command(proxyBin, args...))
	t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
	sc.events.waitFor(t, events.SidecarListening)
	resp := mcpPost(t, "http://"+front+"/mcp", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"p","version":"1"}}}`)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"serverInfo"`), fmt.Sprintf("HTTP %d %s", resp.StatusCode, body)
}

// exampleUpstream starts the example server over HTTP, as transport says
// (--http: Streamable HTTP; --sse: HTTP+SSE), and returns its URL.
func exampleUpstream(t *testing.T, transport string) *url.URL {
	t.Helper()
	up := freePort(t)
	startBackground(t, proxyBin, "example-server", transport, up)
	waitListening(t, up)
	return &url.URL{Scheme: "http", Host: up}
}

// gatewayTo serves a gateway to target that names it as it expects (the
// example server takes loopback Host names only), over TLS if tls, with a
// certificate of a private CA (caFileOf). It closes when the test ends,
// after what the test started since.
func gatewayTo(t *testing.T, target *url.URL, tls bool) *httptest.Server {
	t.Helper()
	gw := httptest.NewUnstartedServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) }})
	if tls {
		gw.StartTLS()
	} else {
		gw.Start()
	}
	t.Cleanup(gw.Close)
	return gw
}

// caFileOf writes the CA certificate a TLS gateway's is signed by as a PEM
// file, and returns its path.
func caFileOf(t *testing.T, gw *httptest.Server) string {
	t.Helper()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: gw.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return ca
}

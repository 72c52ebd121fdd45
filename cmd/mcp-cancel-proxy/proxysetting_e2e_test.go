//go:build unix

package main

import (
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestE2EProxySetting: with http.proxy: env, the sidecar reaches its
// upstream, and a webhook its receiver, through the proxy HTTP_PROXY names
// (a real CONNECT tunnel to names only the proxy resolves); with the
// default (none) the same environment changes no route.
func TestE2EProxySetting(t *testing.T) {
	t.Parallel()
	watchdog(t, 90*time.Second)
	gw := gatewayTo(t, exampleUpstream(t, "--http"), false)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(gw.URL, "http://"))
	p := startConnectProxy(t)
	env := []string{"HTTP_PROXY=http://" + p.addr, "HTTPS_PROXY=http://" + p.addr, "NO_PROXY="}
	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"p","version":"1"}}}`
	sidecarAnswers := func(cfg string) string {
		front := freePort(t)
		startBackgroundEnv(t, env, proxyBin, "--listen", front, "--upstream", "http://mcp.test:"+port+"/mcp",
			"--upstream-transport", "streamable", "--config", cfg)
		waitListening(t, front)
		resp := mcpPost(t, "http://"+front+"/mcp", "", initialize)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}

	envCfg, _ := writeConfig(t, "http:\n  proxy: env\n")
	if got := sidecarAnswers(envCfg); !strings.Contains(got, `"serverInfo"`) {
		t.Errorf("the sidecar with http.proxy: env answered %q, want the server's initialize result", got)
	}
	if !slices.Contains(p.seen(), "mcp.test:"+port) {
		t.Errorf("the proxy tunnelled %v, want mcp.test:%s", p.seen(), port)
	}
	before := len(p.seen())
	noneCfg, _ := writeConfig(t, "log:\n  level: info\n")
	if got := sidecarAnswers(noneCfg); !strings.Contains(got, "-32000") || len(p.seen()) != before {
		t.Errorf("the sidecar by default: answered %q, tunnels %v (before %d); want -32000 (mcp.test unknown) and no tunnel", got, p.seen(), before)
	}

	rc, hookURL := newHookReceiver(t)
	rc.set(false)
	_, hookPort, _ := net.SplitHostPort(strings.TrimPrefix(hookURL, "http://"))
	cfg, _ := writeConfig(t, `
http:
  proxy: env
policy:
  late_window: 1s
  rules:
    - tool: block
      on_cancel:
        http: {url: "http://hooks.test:`+hookPort+`/"}
`)
	cmd := exec.Command(proxyBin, "--config", cfg, "--", proxyBin, "example-server")
	cmd.Env = append(os.Environ(), env...)
	w := startCommand(t, cmd)
	w.initialize(`{}`)
	cancelBlock(t, w, "1", "k1")
	select {
	case <-rc.hit:
	case <-time.After(30 * time.Second):
		t.Fatal("the webhook never reached its receiver")
	}
	if !slices.Contains(p.seen(), "hooks.test:"+hookPort) {
		t.Errorf("the proxy tunnelled %v, want the webhook's hooks.test:%s", p.seen(), hookPort)
	}
}

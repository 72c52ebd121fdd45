package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// keyedUpstream is the example server behind a gate that wants an API key
// and a bearer token, answering 401 with WWW-Authenticate without them.
func keyedUpstream(t *testing.T, key, token string) string {
	up := freePort(t)
	startBackground(t, proxyBin, "example-server", "--http", up)
	waitListening(t, up)
	target, _ := url.Parse("http://" + up)
	rp := httputil.NewSingleHostReverseProxy(target)
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") != key || r.Header.Get("Authorization") != "Bearer "+token {
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="http://127.0.0.1/.well-known/oauth-protected-resource"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(gate.Close)
	return gate.URL + "/mcp"
}

// TestE2EBridgeHeaders: the bridge reaches a server that wants a key:
// --header (its ${VAR} from the environment) and --header-file give it;
// without them the client's request gets the proxy's error of its own kind
// saying what the server wants and how to give it; an unset ${VAR} stops
// the start naming it.
func TestE2EBridgeHeaders(t *testing.T) {
	t.Parallel()
	watchdog(t, 60e9)
	upstream := keyedUpstream(t, "k-123", "t-456")
	file := filepath.Join(t.TempDir(), "headers")
	os.WriteFile(file, []byte("# the token\nAuthorization: Bearer t-456\n"), 0o600)

	keyed := exec.Command(proxyBin, "--upstream", upstream, "--upstream-transport", "streamable", "--header", "X-Api-Key: ${MCP_TEST_API_KEY}", "--header-file", file)
	keyed.Env = append(os.Environ(), "MCP_TEST_API_KEY=k-123")
	w := startCommand(t, keyed)
	w.initialize(`{}`)
	w.send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if m := w.recvUntil(isResponse(float64(2))); !strings.Contains(fmt.Sprint(m[len(m)-1]["result"]), "slow_honour") {
		t.Errorf("tools/list with the headers: %v", m[len(m)-1])
	}

	bare := startWrapped(t, "--upstream", upstream, "--upstream-transport", "streamable")
	bare.send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}`)
	got := bare.recvUntil(isResponse(float64(1)))
	e, _ := got[len(got)-1]["error"].(map[string]any)
	data, _ := e["data"].(map[string]any)
	if e == nil || data["kind"] != "unauthorized" || !strings.Contains(fmt.Sprint(e["message"]), "--header") ||
		!strings.Contains(fmt.Sprint(e["message"]), "resource_metadata") {
		t.Errorf("initialize without the headers: %v, want the proxy's unauthorized error saying how to give them", got[len(got)-1])
	}

	cmd := exec.Command(proxyBin, "--upstream", upstream, "--header", "Authorization: Bearer ${MCP_TEST_UNSET_VAR}")
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != exitUsage || !strings.Contains(string(out), "${MCP_TEST_UNSET_VAR} is not set") {
		t.Errorf("an unset variable: exit %d, %s", cmd.ProcessState.ExitCode(), out)
	}
}

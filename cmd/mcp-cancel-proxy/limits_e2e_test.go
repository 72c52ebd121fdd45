package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// bigHeaders is a real server (the example server over HTTP) behind a
// reverse proxy that adds n bytes of ordinary response headers to every
// answer, as gateways and identity proxies do, and notes the Authorization
// header each request brought.
func bigHeaders(t *testing.T, n int) (upstream string, auth <-chan int) {
	t.Helper()
	up := freePort(t)
	srv := exec.Command(proxyBin, "example-server", "--http", up)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
	waitListening(t, up)
	target, _ := url.Parse("http://" + up)
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(r *http.Response) error {
		for i := 0; i*100 < n; i++ {
			r.Header.Add("X-Policy", strings.Repeat("p", 90))
		}
		return nil
	}
	seen := make(chan int, 16)
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case seen <- len(r.Header.Get("Authorization")):
		default:
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(gw.Close)
	return gw.URL + "/mcp", seen
}

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"a","version":"1"}}}`

// postWith POSTs body to the sidecar with an Authorization header of n
// bytes, and returns the answer's status and body.
func postWith(t *testing.T, front string, n int, body string) (int, string) {
	req := mcpRequest("http://"+front+"/mcp", "", body)
	req.Header.Set("Authorization", "Bearer "+strings.Repeat("t", n))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestE2EHeaderLimits: real-world header sizes pass every HTTP path: a
// client's 6 KB bearer token and an upstream's 5 KiB of response headers
// through the sidecar (both refused before: 431, and "unreachable"), the
// same upstream through the bridge; beyond the limits, the error names the
// setting to raise.
func TestE2EHeaderLimits(t *testing.T) {
	t.Parallel()
	watchdog(t, 60e9)
	upstream, auth := bigHeaders(t, 5<<10)
	front := freePort(t)
	sc := startWrapped(t, "--listen", front, "--upstream", upstream, "--log-level", "debug")
	t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
	sc.events.waitFor(t, events.SidecarListening)
	if code, body := postWith(t, front, 6000, initialize); code != 200 || !strings.Contains(body, `"serverInfo"`) {
		t.Fatalf("initialize with a 6 KB token through 5 KiB of upstream headers: %d %s", code, body)
	}
	if !anyIs(auth, len("Bearer ")+6000) {
		t.Error("the upstream never got the 6 KB Authorization header")
	}
	if code, body := postWith(t, front, 20<<10, initialize); code != 431 || !strings.Contains(body, "limits.max_request_header_bytes") {
		t.Errorf("a 20 KiB header: %d %q, want 431 naming the setting", code, body)
	}

	huge, _ := bigHeaders(t, 80<<10)
	front2 := freePort(t)
	sc2 := startWrapped(t, "--listen", front2, "--upstream", huge, "--upstream-transport", "streamable", "--log-level", "debug")
	t.Cleanup(func() { sc2.cmd.Process.Signal(syscall.SIGTERM) })
	sc2.events.waitFor(t, events.SidecarListening)
	if _, body := postWith(t, front2, 10, initialize); !strings.Contains(body, "limits.max_response_header_bytes") {
		t.Errorf("an upstream with 80 KiB of headers: %q, want an error naming the setting", body)
	} else if strings.Contains(body, "pppppppp") {
		t.Errorf("the client's error quotes the upstream's headers: %q", body)
	}
	// Neither the client's error nor the log quotes the headers: sizes
	// only (issue 40, item 8), on the bridge too.
	b2 := startWrapped(t, "--upstream", huge, "--upstream-transport", "streamable", "--log-level", "debug")
	b2.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`)
	if m := b2.recvUntil(isResponse("init")); !strings.Contains(fmt.Sprint(m[len(m)-1]["error"]), "limits.max_response_header_bytes") {
		t.Errorf("the bridge's answer: %v, want an error naming the setting", m[len(m)-1])
	} else if strings.Contains(fmt.Sprint(m), "pppppppp") {
		t.Errorf("the bridge's error quotes the upstream's headers: %v", m)
	}
	b2.stdin.Close()
	b2.wait()
	for name, logs := range map[string]string{"sidecar": sc2.logs.all(), "bridge": b2.logs.all()} {
		if strings.Contains(logs, "pppppppp") {
			t.Errorf("the %s's log quotes the upstream's headers", name)
		}
	}

	b := startWrapped(t, "--upstream", upstream, "--log-level", "debug")
	b.initialize(`{}`)
	b.send(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if m := b.recvUntil(isResponse(2)); m[len(m)-1]["result"] == nil {
		t.Errorf("tools/list through the bridge: %v", m[len(m)-1])
	}
}

// anyIs reports whether one of the values already sent on ch is want.
func anyIs(ch <-chan int, want int) bool {
	for {
		select {
		case n := <-ch:
			if n == want {
				return true
			}
		default:
			return false
		}
	}
}

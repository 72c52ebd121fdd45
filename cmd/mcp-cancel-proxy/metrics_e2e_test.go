package main

import (
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// metricValue scrapes the admin listener at adm and returns the value of
// the series whose line starts with series (name and labels), or 0.
func metricValue(t *testing.T, adm, series string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + adm + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, _ := strconv.ParseFloat(rest, 64)
			return v
		}
	}
	return 0
}

// waitMetric waits, polling the other process's /metrics (bounded), for a
// series to reach at least want.
func waitMetric(t *testing.T, adm, series string, want float64) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if metricValue(t, adm, series) >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached %v (now %v)", series, want, metricValue(t, adm, series))
		}
		time.Sleep(20 * time.Millisecond) // another process's counter: polled, bounded above
	}
}

// The series a cancelled call whose late answer was held back moves.
const (
	acceptedSeries   = `mcp_cancel_proxy_messages_total{action="cancel accepted",from="client"}`
	suppressedSeries = `mcp_cancel_proxy_messages_total{action="suppressed",from="server"}`
	clientCancels    = `mcp_cancel_proxy_cancels_total{source="client"}`
)

// TestE2EWrapperMetrics: the wrapper's /metrics counts its decisions: an
// accepted cancel, the late answer suppressed, the cancel by source (they
// stayed 0 outside the sidecar's relay: every desktop user's dashboard was
// flat).
func TestE2EWrapperMetrics(t *testing.T) {
	t.Parallel()
	adm := freePort(t)
	w := startWrapped(t, "--admin", adm, "--log-level", "debug", "--", proxyBin, "example-server")
	w.events.waitFor(t, events.AdminListening)
	cancelOneCall(t, w, adm)
}

// cancelOneCall has the stdio client w cancel a call to a server that
// answers anyway, and checks what the admin listener at adm counted of it.
func cancelOneCall(t *testing.T, w *wrapped, adm string) {
	t.Helper()
	w.initialize(`{}`)
	w.send(`{"jsonrpc":"2.0","id":"m1","method":"tools/call","params":{"name":"slow_ignore","arguments":{"seconds":1,"steps":10},"_meta":{"progressToken":"mg"}}}`)
	w.recvUntil(func(m map[string]any) bool { return concerns(m, "none", "mg") })
	w.send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"m1"}}`)
	oneCancelCounted(t, adm)
}

// oneCancelCounted waits for the late answer of one cancelled call to be
// counted suppressed, and checks its cancel was counted once, as the
// client's.
func oneCancelCounted(t *testing.T, adm string) {
	t.Helper()
	waitMetric(t, adm, suppressedSeries, 1)
	for _, series := range []string{acceptedSeries, clientCancels} {
		if v := metricValue(t, adm, series); v != 1 {
			t.Errorf("%s = %v, want 1", series, v)
		}
	}
}

// TestE2EStdioServerOverHTTPMetrics: the same counters for a stdio server
// behind the sidecar.
func TestE2EStdioServerOverHTTPMetrics(t *testing.T) {
	t.Parallel()
	front, adm := freePort(t), freePort(t)
	sc := startWrapped(t, "--listen", front, "--admin", adm, "--cancel-grace", "100ms", "--log-level", "debug", "--", proxyBin, "example-server")
	t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
	sc.events.waitFor(t, events.AdminListening)
	session := ""
	post := func(body string) *http.Response { return mcpPost(t, "http://"+front+"/mcp", session, body) }
	resp := post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"h","version":"1"}}}`)
	session = resp.Header.Get("Mcp-Session-Id")
	<-sseMessages(resp)
	post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close()
	call := sseMessages(post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow_ignore","arguments":{"seconds":1,"steps":10},"_meta":{"progressToken":"h"}}}`))
	<-call
	post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"stop"}}`).Body.Close()
	for range call {
	}
	oneCancelCounted(t, adm)
}

// TestE2EBridgeAdmin: the bridge serves the operations listener too: its
// probes, and /metrics with the counters of a cancelled call.
func TestE2EBridgeAdmin(t *testing.T) {
	t.Parallel()
	up, adm := freePort(t), freePort(t)
	startBackground(t, proxyBin, "example-server", "--http", up)
	waitListening(t, up)
	w := startWrapped(t, "--upstream", "http://"+up+"/mcp", "--admin", adm, "--log-level", "debug")
	w.events.waitFor(t, events.AdminListening)
	for _, path := range []string{"/healthz", "/readyz"} {
		if resp, err := http.Get("http://" + adm + path); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %v %v", path, resp, err)
		} else {
			resp.Body.Close()
		}
	}
	cancelOneCall(t, w, adm)
}

// TestE2EAdminPortBusy: an --admin address already taken stops the
// wrapper's start with a clear error (it ran on without its listener), as
// it stops the sidecar's and the bridge's.
func TestE2EAdminPortBusy(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, args := range [][]string{
		{"--admin", ln.Addr().String(), "--", proxyBin, "example-server"},
		{"--admin", ln.Addr().String(), "--upstream", "http://" + ln.Addr().String() + "/mcp", "--upstream-transport", "streamable"},
	} {
		cmd := exec.Command(proxyBin, args...)
		out, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); err == nil || code != 1 || !strings.Contains(string(out), "cannot listen for admin") {
			t.Errorf("%v: exit %d (%v), output %s; want 1 saying the admin address is taken", args, code, err, out)
		}
	}
}

//go:build unix

package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/natstest"
)

// roundRobin is a load balancer with no session affinity: each request
// goes to the next replica.
func roundRobin(t *testing.T, replicas []string) string {
	var next atomic.Int64
	proxies := make([]*httputil.ReverseProxy, len(replicas))
	for i, r := range replicas {
		u, _ := url.Parse("http://" + r)
		proxies[i] = httputil.NewSingleHostReverseProxy(u)
		proxies[i].FlushInterval = -1 // event streams as they come
	}
	lb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxies[(next.Add(1)-1)%int64(len(proxies))].ServeHTTP(w, r)
	}))
	t.Cleanup(lb.Close)
	return lb.URL + "/mcp"
}

// TestE2EFleetNoAffinity: three sidecar processes in one fleet (a real
// NATS server) in front of one server, behind a round-robin balancer with
// no session affinity. A long call streams through one replica; its cancel
// lands on another: the server receives the cancel, the hook runs once,
// and the late answer (the server answers once released) never reaches
// the client.
func TestE2EFleetNoAffinity(t *testing.T) {
	ns := natstest.Run(t, -1)
	rc, hookURL := newHookReceiver(t)
	rc.set(false)
	up := freePort(t)
	server := exec.Command(proxyBin, "example-server", "--http", up)
	serverLog, _ := server.StderrPipe()
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { server.Process.Kill(); server.Wait() }()
	serverLogs := newLogTail(serverLog)
	waitListening(t, up)
	cfg, _ := webhookConfig(t, hookURL, `
cluster:
  nats: "`+ns.ClientURL()+`"`, "")
	var fronts []string
	var replicas []*wrapped
	for range 3 {
		front := freePort(t)
		sc := startWrapped(t, "--config", cfg, "--listen", front, "--upstream", "http://"+up+"/mcp")
		t.Cleanup(func() { sc.cmd.Process.Signal(syscall.SIGTERM) })
		sc.logs.waitFor(t, "sidecar listening")
		fronts, replicas = append(fronts, front), append(replicas, sc)
	}
	lb := roundRobin(t, fronts)
	resp := mcpPost(t, lb, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"a","version":"1"}}}`) // replica 0
	session := resp.Header.Get("Mcp-Session-Id")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	mcpPost(t, lb, session, `{"jsonrpc":"2.0","method":"notifications/initialized"}`).Body.Close() // replica 1
	stream := sseMessages(mcpPost(t, lb, session,                                                  // replica 2 holds the call
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"block","arguments":{"key":"far"},"_meta":{"progressToken":"p"}}}`))
	<-stream                                                                                                              // progress: the call runs
	mcpPost(t, lb, session, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`).Body.Close() // replica 0
	serverLogs.waitFor(t, "block far: the request was cancelled")
	replicas[2].logs.waitFor(t, "cancel accepted for another replica")
	<-rc.hit // the hook ran
	mcpPost(t, lb, session, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"release","arguments":{"key":"far"}}}`).Body.Close()
	for m := range stream {
		if strings.Contains(m, `"id":2`) {
			t.Errorf("the client got the late answer: %s", m)
		}
	}
	select {
	case <-rc.hit:
		t.Error("the hook ran twice")
	case <-time.After(500 * time.Millisecond): // a bound on what must not happen
	}
}

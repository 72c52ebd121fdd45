package upstream_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"net/url"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream/upstreamtest"
)

// TestOrderKeptThroughTheBridge: a client of the bridge (a session of
// lines over the Streamable HTTP Conn) that sends a call, then, once the
// server has it, its cancel and
// a new call reusing the id in one burst, round after round: the server
// reads every cancel after the request it names and before the request
// that reuses its id (which the core renames), never two calls in flight
// under one id; the client gets the answer of every call it did not
// cancel, and nothing of the ones it did.
func TestOrderKeptThroughTheBridge(t *testing.T) {
	srv := upstreamtest.NewOrderServer()
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close) // after the bridge has ended (cleanups run last first)
	u, _ := url.Parse(hs.URL + "/mcp")
	toBridge, lines := bridged(t, u, zaptest.NewLogger(t))
	next := func() map[string]any {
		t.Helper()
		line, err := lines.ReadString('\n')
		if err != nil {
			t.Fatalf("the bridge's output ended: %v", err)
		}
		var m map[string]any
		json.Unmarshal([]byte(line), &m)
		return m
	}
	io.WriteString(toBridge, `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
	next()
	io.WriteString(toBridge, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	const rounds = 40
	for r := range rounds {
		id := r % 2
		fmt.Fprintf(toBridge, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"t","arguments":{"hold":true}}}`+"\n", id)
		<-srv.Held // the server has it: its cancel is one to carry, not a withdrawal
		fmt.Fprintf(toBridge, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}`+"\n"+
			`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"t","arguments":{}}}`+"\n", id, id)
		if m := next(); m["id"] != float64(id) || m["result"] == nil {
			t.Fatalf("round %d: the client got %v, want the answer of the call that reused id %d", r, m, id)
		}
	}
	io.WriteString(toBridge, `{"jsonrpc":"2.0","id":"last","method":"ping"}`+"\n")
	if m := next(); m["id"] != "last" {
		t.Fatalf("the client got %v before the ping's answer, want nothing more", m)
	}
	srv.Check(t, rounds)
}

// bridged runs the bridge (a stdio session over a session of the
// Streamable HTTP server at u) until the test ends, and returns where its
// client writes and what it reads.
func bridged(t testing.TB, u *url.URL, log *zap.Logger) (io.Writer, *bufio.Reader) {
	back, err := (&upstream.StreamableUpstream{Endpoint: upstream.Endpoint{URL: u, Client: upstream.NewClient(0, 0)}}).Dial(log)
	if err != nil {
		t.Fatal(err)
	}
	cIn, toBridge := io.Pipe()
	fromBridge, cOut := io.Pipe()
	sess := stdio.NewSession(stdio.Options{Logger: log})
	done := make(chan error, 1)
	go func() { done <- sess.Run(stdio.Conn{In: cIn, Out: cOut}, back.Conn()) }()
	t.Cleanup(func() {
		toBridge.Close()
		back.Stop()
		<-back.Exited()
		<-done
		<-sess.ReaderDone()
	})
	return toBridge, bufio.NewReader(fromBridge)
}

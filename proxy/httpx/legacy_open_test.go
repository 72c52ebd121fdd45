//go:build unix

package httpx_test

import (
	"bufio"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// stalledServer is a stdio server's pipes that the test reads and writes
// itself: until it reads (readTo), the proxy's lines wait in the pipe and
// the connection's queue behind it.
type stalledServer struct {
	rd   *bufio.Reader // what the proxy wrote to the server
	says *os.File      // where the server's lines go
	dial upstream.Dialer
}

// bigCall is a call far larger than a pipe holds: written in part, it
// keeps what follows it queued.
var bigCall = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + strings.Repeat("x", 256<<10) + `"}}`

func newStalledServer(t *testing.T) *stalledServer {
	toR, toW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fromR, fromW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { toR.Close(); fromW.Close() })
	return &stalledServer{rd: bufio.NewReaderSize(toR, 1<<20), says: fromW,
		dial: upstream.DialFunc(func(log *zap.Logger) (upstream.Conn, error) {
			return upstream.NewPipeConn(fromR, toW, upstream.PipeOptions{Stop: func() { fromW.Close() }, Logger: log}), nil
		})}
}

// readTo reads the server's stdin up to marker, and returns the lines
// before it, each cut to its first 40 bytes.
func (s *stalledServer) readTo(t *testing.T, marker string) []string {
	t.Helper()
	var got []string
	for {
		line, err := s.rd.ReadString('\n')
		if err != nil {
			t.Fatalf("the server's stdin: %v, after %d lines", err, len(got))
		}
		if line = strings.TrimSuffix(line, "\n"); line == marker {
			return got
		}
		got = append(got, line[:min(len(line), 40)])
	}
}

// TestLegacyWithdrawsWhatAStdioServerHasNotRead: an old client's session
// of a stdio server that does not read its stdin queues in the server's
// own pipe queue, so the cancel of a request still queued there withdraws
// both, and is recorded as withdrawn (it was recorded as a cancel sent,
// the server's connection withdrawing the request unseen): the server,
// reading again, gets the first call and never the second nor its cancel.
func TestLegacyWithdrawsWhatAStdioServerHasNotRead(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	srv := newStalledServer(t)
	cs := &httpx.Children{Dial: srv.dial}
	var sc *httpx.Sidecar
	url := childSidecar(t, cs, func(s *httpx.Sidecar) { s.Legacy = &httpx.Legacy{}; sc = s })
	c := openLegacyClient(t, strings.TrimSuffix(url, "/mcp"))
	for _, msg := range []string{bigCall, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"q"}}`,
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`} {
		c.post(msg)
	}
	if st := sc.Stats(); st.Withdrawn != 1 {
		t.Errorf("withdrawn: %d, want 1 (cancels sent: %d)", st.Withdrawn, st.CancelsForwarded)
	}
	marker := `{"jsonrpc":"2.0","method":"notifications/marker"}`
	c.post(marker)
	if got := srv.readTo(t, marker); len(got) != 1 || !strings.HasPrefix(bigCall, got[0]) {
		t.Errorf("the server read %q before the marker, want only the first call", got)
	}
}

// TestLegacyServerThatCannotStart: an old client whose server cannot be
// started at its first message gets, where every answer goes (its event
// stream), the proxy's -32000 saying so (kind unavailable), as a
// Streamable HTTP client does, the cause left to the proxy's log; the
// stream then ends, and a later POST finds no session. (It got "the MCP
// server exited before answering", which it had never started.)
func TestLegacyServerThatCannotStart(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	cs := &httpx.Children{Dial: upstream.DialFunc(func(*zap.Logger) (upstream.Conn, error) {
		return nil, errors.New("no such command")
	})}
	url := childSidecar(t, cs, func(s *httpx.Sidecar) { s.Legacy = &httpx.Legacy{} })
	c := openLegacyClient(t, strings.TrimSuffix(url, "/mcp"))
	c.post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`)
	m := <-c.msgs
	e, _ := m["error"].(map[string]any)
	if msg, _ := e["message"].(string); m["id"] != 1.0 || e["code"] != -32000.0 || !strings.Contains(msg, "cannot start the MCP server") ||
		strings.Contains(msg, "no such command") {
		t.Errorf("the answer: %v, want the proxy's -32000 saying the server cannot start, not why", m)
	}
	for range c.msgs { // until the event stream ends
	}
	if code, _ := c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`); code != http.StatusNotFound {
		t.Errorf("a later POST: %d, want 404", code)
	}
}

// TestChildWithdrawsWhatAStdioServerHasNotRead is
// TestLegacyWithdrawsWhatAStdioServerHasNotRead for a Streamable HTTP
// client's session of a stdio server: the cancel of a request
// still queued for a stdio server that does not read withdraws both, and
// is recorded as withdrawn; the server, reading again, gets the first call
// and never the second nor its cancel. (The wrapper's is
// TestCancelNeverWaitsBehindQueuedFrames.)
func TestChildWithdrawsWhatAStdioServerHasNotRead(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	srv := newStalledServer(t)
	forwarded := make(chan proxy.Event, 16)
	cs := &httpx.Children{Dial: srv.dial, Session: stdio.Options{OnEvent: func(e proxy.Event) {
		if e.From == proxy.Client.String() && e.Kind == framing.KindRequest && (e.Action == proxy.ActForwarded || e.Action == proxy.ActWithdrawn) {
			forwarded <- e
		}
	}}}
	var sc *httpx.Sidecar
	c := &childClient{t: t, url: childSidecar(t, cs, func(s *httpx.Sidecar) { sc = s })}
	inited := make(chan struct{})
	go func() {
		defer close(inited)
		c.post(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	}()
	if line, err := srv.rd.ReadString('\n'); err != nil || !strings.Contains(line, `"initialize"`) {
		t.Fatalf("the server's first line: %q, %v", line, err)
	}
	srv.says.WriteString(`{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}` + "\n")
	<-inited
	if <-forwarded; c.session == "" {
		t.Fatal("no session")
	}
	var calls sync.WaitGroup
	t.Cleanup(calls.Wait)
	for i, call := range []string{bigCall, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"q"}}`} {
		calls.Go(func() { c.post(call) }) // each answered at the end: 1 by the server, 2 at its cancel
		if e := <-forwarded; e.Action != proxy.ActForwarded || e.ID != framing.IntID(int64(i+1)) {
			t.Fatalf("event %s %v, want call %d forwarded", e.Action, e.ID, i+1)
		}
	}
	if status, body := c.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`); status != http.StatusAccepted {
		t.Fatalf("the cancel: %d %s", status, body)
	}
	if st := sc.Stats(); st.Withdrawn != 1 {
		t.Errorf("withdrawn: %d, want 1 (cancels sent: %d)", st.Withdrawn, st.CancelsForwarded)
	}
	marker := `{"jsonrpc":"2.0","method":"notifications/marker"}`
	if status, body := c.post(marker); status != http.StatusAccepted {
		t.Fatalf("the marker: %d %s", status, body)
	}
	if got := srv.readTo(t, marker); len(got) != 1 || !strings.HasPrefix(bigCall, got[0]) {
		t.Errorf("the server read %q before the marker, want only the first call", got)
	}
	srv.says.WriteString(`{"jsonrpc":"2.0","id":1,"result":{}}` + "\n")
}

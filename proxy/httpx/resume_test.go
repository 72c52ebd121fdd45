package httpx_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/check"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// resumingUpstream is a stateful Streamable HTTP server that ends a call's
// stream after its first event, before the answer, and hands the answer to
// a GET that resumes the stream after that event (Last-Event-ID). With ids
// false its events carry no id, so nothing can resume the stream.
func resumingUpstream(t *testing.T, ids bool) (url string, resumed <-chan string) {
	got := make(chan string, 4) // the Last-Event-ID of each GET
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		id := func(n string) string {
			if ids {
				return "id: " + n + "\n"
			}
			return ""
		}
		switch {
		case req.Method == http.MethodDelete:
		case req.Method == http.MethodGet && req.Header.Get("Last-Event-ID") == "":
			w.Header().Set("Content-Type", "text/event-stream") // the standalone stream: nothing on it
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-req.Context().Done()
		case req.Method == http.MethodGet:
			got <- req.Header.Get("Last-Event-ID")
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "%sdata: %s\n\n", id("e2"), `{"jsonrpc":"2.0","id":2,"result":{"content":[]}}`)
		case strings.Contains(string(body), `"initialize"`):
			w.Header().Set("Mcp-Session-Id", "s1")
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"r","version":"1"}}}`)
		case strings.Contains(string(body), `"tools/call"`):
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "%sdata: %s\n\n", id("e1"),
				`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1}}`)
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/mcp", got
}

// TestResumedStreamBringsTheAnswer: a call's stream whose events carry ids
// may end before its answer (a server that lets the client poll); the
// sidecar then says nothing of its own, and the client's GET with
// Last-Event-ID, relayed, brings the answer. A stream without ids, which
// nothing can resume, is answered -32000 instead.
func TestResumedStreamBringsTheAnswer(t *testing.T) {
	t.Parallel()
	for _, ids := range []bool{true, false} {
		t.Run(fmt.Sprintf("ids=%v", ids), func(t *testing.T) {
			watchdog(t, 30*time.Second)
			up, resumed := resumingUpstream(t, ids)
			c := &rawClient{t: t, url: serveSidecar(t, &httpx.Sidecar{Upstream: up})}
			c.initialize()
			var last map[string]any
			for m := range events(c.post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"poll","_meta":{"progressToken":"p"}}}`).Body) {
				last = m
			}
			if !ids {
				if e, _ := last["error"].(map[string]any); last["id"] != 2.0 || e["code"] != -32000.0 {
					t.Fatalf("a stream nothing can resume ended with %v, want the proxy's -32000 for request 2", last)
				}
				return
			}
			if last["method"] != "notifications/progress" {
				t.Fatalf("the stream ended with %v, want its progress and nothing of the proxy's", last)
			}
			req, _ := http.NewRequest(http.MethodGet, c.url, nil)
			req.Header.Set("Accept", "text/event-stream")
			req.Header.Set("Mcp-Session-Id", c.session)
			req.Header.Set("MCP-Protocol-Version", "2025-06-18")
			req.Header.Set("Last-Event-ID", "e1")
			resp, err := testClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if from := <-resumed; from != "e1" {
				t.Errorf("the upstream was asked to resume after %q, want e1", from)
			}
			var answer map[string]any
			for m := range events(resp.Body) {
				answer = m
			}
			if answer["id"] != 2.0 || answer["result"] == nil {
				t.Errorf("the resumed stream brought %v, want the answer to request 2", answer)
			}
		})
	}
}

// TestBridgeResumesTheStream: the bridge's Streamable HTTP client (what old
// clients and a stdio client reach an upstream through) has no client of
// its own that could resume a stream: it resumes it itself, after the last
// event's id, and the answer reaches its client. Without ids it answers
// -32000 instead of waiting for ever.
func TestBridgeResumesTheStream(t *testing.T) {
	t.Parallel()
	for _, ids := range []bool{true, false} {
		t.Run(fmt.Sprintf("ids=%v", ids), func(t *testing.T) {
			watchdog(t, 30*time.Second)
			url, resumed := resumingUpstream(t, ids)
			up, err := upstream.NewStreamableUpstream(url, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			up2, err := up.Dial(zaptest.NewLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			conn := check.OverConn(up2)
			t.Cleanup(conn.Stop)
			lines := framing.NewReader(conn.In, 0)
			next := func() map[string]any {
				t.Helper()
				line, err := lines.Read(nil)
				if err != nil {
					t.Fatalf("the backend's lines ended: %v", err)
				}
				var m map[string]any
				if err := json.Unmarshal(line, &m); err != nil {
					t.Fatalf("not JSON: %s", line)
				}
				return m
			}
			send := func(line string) {
				t.Helper()
				if _, err := io.WriteString(conn.Out, line+"\n"); err != nil {
					t.Fatal(err)
				}
			}
			send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}`)
			if m := next(); m["id"] != 0.0 {
				t.Fatalf("initialize: %v", m)
			}
			send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"poll","_meta":{"progressToken":"p"}}}`)
			if m := next(); m["method"] != "notifications/progress" {
				t.Fatalf("first: %v, want the progress", m)
			}
			m := next()
			if !ids {
				if e, _ := m["error"].(map[string]any); m["id"] != 2.0 || e["code"] != -32000.0 {
					t.Fatalf("a stream nothing can resume: %v, want the proxy's -32000 for request 2", m)
				}
				return
			}
			if m["id"] != 2.0 || m["result"] == nil {
				t.Fatalf("got %v, want the answer to request 2 from the resumed stream", m)
			}
			if from := <-resumed; from != "e1" { // the answer came on the resumed stream: its GET was made
				t.Errorf("resumed after %q, want e1", from)
			}
		})
	}
}

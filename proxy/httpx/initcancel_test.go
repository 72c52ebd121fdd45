package httpx_test

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// TestInitializeCancelIsDroppedOnAStdioServer: the client MUST NOT cancel
// initialize; a cancel of it that comes anyway is dropped, and the answer
// still reaches the client on its stream, on a stdio server's front as on
// the wrapper and the relay (the stream ended empty there: the answer was
// lost). The server here answers initialize only once it has read the
// next line, notifications/initialized, which the client sends after the
// cancel: the cancel (dropped by then, never sent) surely came first.
func TestInitializeCancelIsDroppedOnAStdioServer(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	script := `read init; read next; printf '%s\n' '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"sh","version":"1"}}}'; cat > /dev/null`
	// No grace after a cancel: a stream the cancel ended would end at once.
	url := childSidecar(t, &httpx.Children{Dial: &upstream.Command{Argv: []string{"sh", "-c", script}}}, func(sc *httpx.Sidecar) { sc.CancelGrace = time.Nanosecond })
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	session := resp.Header.Get("Mcp-Session-Id")
	if session == "" {
		t.Fatalf("no session id before the answer: %v", resp.Header)
	}
	c := &childClient{t: t, url: url, session: session}
	if code, _ := c.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"no"}}`); code != 202 {
		t.Errorf("the cancel: %d, want 202", code)
	}
	c.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	body, _ := io.ReadAll(bufio.NewReader(resp.Body))
	if !strings.Contains(string(body), `"serverInfo"`) {
		t.Errorf("initialize's stream carried %q, want its answer", body)
	}
}

// TestUpstreamGoneBeforeTheFirstAnswer: an HTTP+SSE upstream that ends
// its event stream right after its endpoint event: the first initialize,
// already sent, gets the proxy's -32000 on its stream (an empty 200 before),
// as later requests get an error.
func TestUpstreamGoneBeforeTheFirstAnswer(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sse", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: endpoint\ndata: /message\n\n") // and the stream ends
	})
	mux.HandleFunc("POST /message", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	up, err := upstream.NewSSEUpstream(srv.URL+"/sse", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := &childClient{t: t, url: childSidecar(t, &httpx.Children{Dial: up})}
	code, body := c.post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`)
	if !strings.Contains(body, `"code":-32000`) {
		t.Errorf("the first initialize: %d %q, want the proxy's -32000", code, body)
	}
}

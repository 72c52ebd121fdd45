package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bigAnswerSSEUpstream is a 2024-11-05 HTTP+SSE server whose answer to a
// tools/call is one event of n bytes; it answers initialize and ping.
func bigAnswerSSEUpstream(t *testing.T, n int) string {
	events := make(chan string, 16)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sse", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: endpoint\ndata: /message?s=1\n\n")
		w.(http.Flusher).Flush()
		for {
			select {
			case ev := <-events:
				io.WriteString(w, "event: message\ndata: "+ev+"\n\n")
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	})
	mux.HandleFunc("POST /message", func(w http.ResponseWriter, r *http.Request) {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		json.NewDecoder(r.Body).Decode(&m)
		w.WriteHeader(http.StatusAccepted)
		switch m.Method {
		case "initialize":
			events <- fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2024-11-05","capabilities":{},"serverInfo":{"name":"big","version":"1"}}}`, m.ID)
		case "ping":
			events <- fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{}}`, m.ID)
		case "tools/call":
			events <- fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"%s"}]}}`, m.ID, strings.Repeat("x", n))
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/sse"
}

// TestE2ESSEUpstreamOverLongEvent: an HTTP+SSE upstream's answer over
// limits.max_frame_size is skipped as the wrapper skips an over-long line:
// its request gets -32603 saying so, and the session goes on (it ended,
// "the MCP server exited").
func TestE2ESSEUpstreamOverLongEvent(t *testing.T) {
	t.Parallel()
	watchdog(t, 60e9)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(cfg, []byte("limits:\n  max_frame_size: 64KiB\n"), 0o600)
	w := startWrapped(t, "--config", cfg, "--upstream", bigAnswerSSEUpstream(t, 200<<10), "--upstream-transport", "sse", "--log-level", "debug")
	w.initialize(`{}`)
	w.send(`{"jsonrpc":"2.0","id":"big","method":"tools/call","params":{"name":"x","arguments":{}}}`)
	got := w.recvUntil(isResponse("big"))
	e, _ := got[len(got)-1]["error"].(map[string]any)
	if e == nil || e["code"] != float64(-32603) || !strings.Contains(fmt.Sprint(e["message"]), "size limit") {
		t.Fatalf("the call's answer: %v, want -32603 naming the size limit", got[len(got)-1])
	}
	w.send(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if m := w.recvUntil(isResponse(float64(2))); m[len(m)-1]["result"] == nil {
		t.Errorf("ping after the over-long event: %v", m[len(m)-1])
	}
}

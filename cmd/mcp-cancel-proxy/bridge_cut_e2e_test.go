package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// cuttingUpstream is a Streamable HTTP server that answers initialize and
// ping, and answers a tools/call with an event stream that reports progress
// and then breaks: the connection is cut in the middle of the call.
func cuttingUpstream(t *testing.T) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		json.Unmarshal(body, &m)
		switch {
		case m.Method == "initialize":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"cut","version":"1"}}}`, m.ID)
		case m.Method == "ping":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{}}`, m.ID)
		case m.Method == "tools/call":
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, `data: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"c","progress":1}}`+"\n\n")
			w.(http.Flusher).Flush()
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close() // mid-call: the stream breaks
			}
		case len(m.ID) == 0:
			w.WriteHeader(http.StatusAccepted)
		default:
			http.Error(w, "unknown", http.StatusBadRequest)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestE2EBridgeCutStreamAnswersTheRequest: an upstream whose stream breaks
// mid-call: the bridge answers the call -32000 at once, as the sidecar
// does (the client waited for ever), and the session goes on.
func TestE2EBridgeCutStreamAnswersTheRequest(t *testing.T) {
	t.Parallel()
	watchdog(t, 60e9)
	w := startWrapped(t, "--upstream", cuttingUpstream(t), "--upstream-transport", "streamable", "--log-level", "debug")
	w.initialize(`{}`)
	w.send(`{"jsonrpc":"2.0","id":"c1","method":"tools/call","params":{"name":"x","arguments":{},"_meta":{"progressToken":"c"}}}`)
	got := w.recvUntil(isResponse("c1"))
	last := got[len(got)-1]
	e, _ := last["error"].(map[string]any)
	if e == nil || e["code"] != float64(-32000) || !strings.Contains(fmt.Sprint(e["message"]), "stream broke") {
		t.Fatalf("the call's answer: %v, want -32000 saying the stream broke", last)
	}
	w.send(`{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if m := w.recvUntil(isResponse(float64(2))); m[len(m)-1]["result"] == nil {
		t.Errorf("ping after the cut: %v", m[len(m)-1])
	}
}

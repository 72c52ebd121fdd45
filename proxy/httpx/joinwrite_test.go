package httpx_test

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
)

// TestHeldEventIsNotKeptWaiting: the sidecar holds a relayed event's write
// to join it with the next one, but never while it waits for the
// upstream: an answer whose stream the upstream keeps open after it (it
// may: closing is a SHOULD) reaches the client at once, and the stream
// ends when the upstream's does.
func TestHeldEventIsNotKeptWaiting(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[]}}\n\n"))
		w.(http.Flusher).Flush()
		<-release
	}))
	defer up.Close()
	defer close(release)
	url := serveSidecar(t, &httpx.Sidecar{Upstream: up.URL + "/mcp", UpstreamTransport: httpx.TransportStreamable})
	req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo",`+
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "echo")
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data:") {
				answer <- sc.Text()
				return
			}
		}
		answer <- fmt.Sprint("the stream ended: ", sc.Err())
	}()
	select {
	case got := <-answer:
		if !strings.Contains(got, `"id":1`) {
			t.Fatalf("got %q, want the answer", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the answer waited for the upstream to end its stream")
	}
}

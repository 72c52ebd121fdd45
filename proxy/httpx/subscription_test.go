package httpx_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	feed "github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/strict"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
)

// TestTwoListensOfOneIDOnTheSharedChild: two 2026-07-28 clients, without
// sessions, each listen with id 1 through the sidecar to one stdio server
// (the shared child): the server knows them under two names, and each
// client gets its own acknowledgement and notifications, on its own
// stream and under its own id 1 (io.modelcontextprotocol/subscriptionId);
// a client that closes its stream (the cancel, in 2026-07-28) ends its own
// listen only. Before, the notifications named the server's aliases, and
// went to whichever stream was open last.
func TestTwoListensOfOneIDOnTheSharedChild(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	events, err := feed.Open("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { events.Close() })
	accepted := events.Subscribe(64)
	url := childSidecar(t, &httpx.Children{}, func(s *httpx.Sidecar) { s.Logger = zap.New(events.Core()) })
	post := func(ctx context.Context, body string) *http.Response {
		t.Helper()
		var m struct{ Method string }
		json.Unmarshal([]byte(body), &m)
		req, _ := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", m.Method)
		if m.Method == "tools/call" {
			req.Header.Set("Mcp-Name", "notify")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`
	const listen = `{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},` + meta + `}}`
	notify := func() {
		resp := post(context.Background(), `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"notify","arguments":{},`+meta+`}}`)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	ctxA, leaveA := context.WithCancel(context.Background())
	defer leaveA()
	a := strict.Messages(post(ctxA, listen))
	b := strict.Messages(post(context.Background(), listen))
	for name, stream := range map[string]<-chan string{"A": a, "B": b} {
		expectNote(t, name, stream, "notifications/subscriptions/acknowledged")
	}
	notify()
	for name, stream := range map[string]<-chan string{"A": a, "B": b} {
		expectNote(t, name, stream, "notifications/tools/list_changed")
	}
	leaveA()
	waitEvent(t, accepted, feed.CancelAccepted, "method", "subscriptions/listen")
	notify()
	expectNote(t, "B", b, "notifications/tools/list_changed")
	for data := range a {
		t.Errorf("A, after it left: %s", data)
	}
}

// expectNote reads a stream's next message: a notification of method,
// under the subscription id 1.
func expectNote(t *testing.T, name string, stream <-chan string, method string) {
	t.Helper()
	select {
	case data, ok := <-stream:
		var m struct {
			Method string
			Params struct {
				Meta map[string]any `json:"_meta"`
			}
		}
		json.Unmarshal([]byte(data), &m)
		if !ok || m.Method != method || m.Params.Meta["io.modelcontextprotocol/subscriptionId"] != 1.0 {
			t.Fatalf("%s: %q, want %s of subscription 1", name, data, method)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no %s in 10s", name, method)
	}
}

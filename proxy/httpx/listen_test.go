package httpx_test

import (
	"strings"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// TestListenTornDownEndsItsStream: a stdio server ends a client's
// subscriptions/listen with notifications/cancelled (the one cancel a
// server may send, in 2026-07-28, on stdio); behind the sidecar that
// cancel reaches the client on the listen request's own stream, and the
// stream ends (it stayed open for ever, holding the session busy).
func TestListenTornDownEndsItsStream(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	script := `read init; printf '%s\n' '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"sh","version":"1"}}}'; ` +
		`read initialized; read listen; ` +
		`printf '%s\n' '{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///a"}}'; ` +
		`printf '%s\n' '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"sub-1","reason":"done"}}'; cat > /dev/null`
	c := &childClient{t: t, url: childSidecar(t, &httpx.Children{Dial: &upstream.Command{Argv: []string{"sh", "-c", script}}})}
	c.post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`)
	c.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	ended := make(chan string, 1)
	go func() {
		_, body := c.post(`{"jsonrpc":"2.0","id":"sub-1","method":"subscriptions/listen","params":{"notifications":{"resources/updated":["file:///a"]}}}`)
		ended <- body
	}()
	select {
	case body := <-ended:
		if !strings.Contains(body, `notifications/resources/updated`) || !strings.Contains(body, `"method":"notifications/cancelled","params":{"requestId":"sub-1"`) {
			t.Errorf("the listen stream carried %q, want the update and the server's cancel", body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the listen stream did not end when the server tore the subscription down")
	}
}

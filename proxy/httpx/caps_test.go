package httpx_test

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
)

// TestRelayedSessionsCap: relayed sessions have a cap of their own (they
// had none): an initialize beyond it gets 503 with Retry-After and never
// reaches the upstream, and no session is evicted for it; once a session
// ends, there is room again.
func TestRelayedSessionsCap(t *testing.T) {
	watchdog(t, 30*time.Second)
	up := newUpstream(t, &mcp.StreamableHTTPOptions{})
	url := serveSidecar(t, &httpx.Sidecar{Upstream: up.url, MaxRelayedSessions: 1})
	a := &rawClient{t: t, url: url}
	a.initialize()
	resp := (&rawClient{t: t, url: url}).post(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}`)
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("an initialize beyond the cap: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if code, body := answer(a, `{"jsonrpc":"2.0","id":5,"method":"tools/list"}`); code != 200 || !strings.Contains(body, "wait_cancel") {
		t.Errorf("the first session after the refusal: %d %s", code, body)
	}
	a.end()
	b := &rawClient{t: t, url: url}
	b.initialize() // room again
}

// TestLegacyStreamWithoutInitializeIsClosed: an old client's event stream
// that never POSTs initialize is closed after http.legacy_init_wait (such
// streams held every slot for ever: 503 for every other old client).
func TestLegacyStreamWithoutInitializeIsClosed(t *testing.T) {
	watchdog(t, 30*time.Second)
	fake := clock.NewFake(time.Now())
	url := childSidecar(t, &httpx.Children{}, func(sc *httpx.Sidecar) {
		sc.Legacy, sc.Clock, sc.MaxSessions = &httpx.Legacy{InitWait: 10 * time.Second}, fake, 1
	})
	sse := strings.TrimSuffix(url, "/mcp") + "/sse"
	resp, err := testClient.Get(sse)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	if line, _ := rd.ReadString('\n'); !strings.HasPrefix(line, "event: endpoint") {
		t.Fatalf("first line %q, want the endpoint event", line)
	}
	if second, err := testClient.Get(sse); err == nil {
		second.Body.Close()
		if second.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("a second stream at the cap: %d, want 503", second.StatusCode)
		}
	}
	fake.Advance(10 * time.Second)
	if rest, err := io.ReadAll(rd); err != nil {
		t.Fatalf("the stream after the wait: %v (%q)", err, rest)
	}
}

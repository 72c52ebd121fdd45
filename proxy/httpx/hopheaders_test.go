package httpx_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
)

// TestHopHeadersDropped: the headers a client's Connection header names,
// and its forwarding headers (X-Forwarded-For, Forwarded), do not reach
// the upstream, unless the client is a trusted proxy, whose forwarding
// headers go on; request metadata headers the sidecar does not know
// (Mcp-Param-*) go on, as the spec asks of intermediaries. Before, every
// one went upstream unchanged: a client could tell the server it was
// someone else.
func TestHopHeadersDropped(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	seen := make(chan http.Header, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"tools/list"`) { // not the sidecar's own (server/discover)
			seen <- r.Header.Clone()
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}`))
	}))
	t.Cleanup(up.Close)
	send := func(url string) http.Header {
		t.Helper()
		c := &rawClient{t: t, url: url}
		req := c.request(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
		req.Header.Set("Connection", "keep-alive, X-Secret")
		req.Header.Set("X-Secret", "for this hop only")
		req.Header.Set("X-Forwarded-For", "192.0.2.66")
		req.Header.Set("Forwarded", "for=192.0.2.66")
		req.Header.Set("Mcp-Param-Unknown", "goes on")
		conn, err := net.Dial("tcp", strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/mcp"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		req.Write(conn)
		resp, err := http.ReadResponse(bufio.NewReader(conn), req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		select {
		case h := <-seen:
			return h
		default:
			t.Fatalf("the upstream got nothing (HTTP %d)", resp.StatusCode)
			return nil
		}
	}
	h := send(serveSidecar(t, &httpx.Sidecar{Upstream: up.URL}))
	for _, name := range []string{"X-Secret", "X-Forwarded-For", "Forwarded"} {
		if v := h.Get(name); v != "" {
			t.Errorf("the upstream got %s: %s", name, v)
		}
	}
	if h.Get("Mcp-Param-Unknown") != "goes on" {
		t.Errorf("an unknown Mcp-Param header did not go on: %v", h)
	}
	trusted := send(serveSidecar(t, &httpx.Sidecar{Upstream: up.URL, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}))
	if trusted.Get("X-Forwarded-For") != "192.0.2.66" || trusted.Get("Forwarded") != "for=192.0.2.66" || trusted.Get("X-Secret") != "" {
		t.Errorf("behind a trusted proxy the upstream got %v", trusted)
	}
}

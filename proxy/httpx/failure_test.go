package httpx_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
)

func errorOf(t *testing.T, resp *http.Response) (id any, code int, data map[string]any) {
	t.Helper()
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var r struct {
		ID    any
		Error *struct {
			Code int
			Data map[string]any
		}
	}
	if err := json.Unmarshal(body, &r); err != nil || r.Error == nil {
		t.Fatalf("want a JSON-RPC error, got %d %s", resp.StatusCode, body)
	}
	return r.ID, r.Error.Code, r.Error.Data
}

// TestUnreachableUpstream: a request gets a JSON-RPC error that names the
// proxy, not a hung or bare HTTP failure.
func TestUnreachableUpstream(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	dead := deadURL()
	c := &rawClient{t: t, url: startSidecar(t, dead, proxy.TrackerOptions{})}
	id, code, data := errorOf(t, c.post(`{"jsonrpc":"2.0","id":"x","method":"tools/list"}`))
	if id != "x" || code != proxy.CodeServerGone || data["proxy"] != "mcp-cancel-proxy" {
		t.Errorf("got id %v code %d data %v", id, code, data)
	}
}

// TestUpstream5xx: a server error becomes a JSON-RPC error on the request.
func TestUpstream5xx(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "database on fire", http.StatusInternalServerError)
	}))
	defer srv.Close()
	c := &rawClient{t: t, url: startSidecar(t, srv.URL, proxy.TrackerOptions{})}
	id, code, _ := errorOf(t, c.post(`{"jsonrpc":"2.0","id":7,"method":"tools/list"}`))
	if id != float64(7) || code != proxy.CodeServerGone {
		t.Errorf("got id %v code %d", id, code)
	}
}

// TestMalformedPOST: a body that is not JSON gets 400 with -32700.
func TestMalformedPOST(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up := newUpstream(t, &mcp.StreamableHTTPOptions{})
	c := &rawClient{t: t, url: startSidecar(t, up.url, proxy.TrackerOptions{})}
	resp := c.post(`{"jsonrpc":`)
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("status %d, want 400", resp.StatusCode)
	}
	if _, code, _ := errorOf(t, resp); code != -32700 {
		t.Errorf("code %d, want -32700", code)
	}
}

// TestOriginAndHost: a foreign Origin or Host is refused with 403.
func TestOriginAndHost(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up := newUpstream(t, &mcp.StreamableHTTPOptions{})
	url := startSidecar(t, up.url, proxy.TrackerOptions{})
	for _, h := range []struct{ name, value string }{{"Origin", "http://evil.example.com"}, {"Host", "evil.example.com"}} {
		req, _ := http.NewRequest("POST", url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
		if h.name == "Host" {
			req.Host = h.value
		} else {
			req.Header.Set(h.name, h.value)
		}
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s %s: status %d, want 403", h.name, h.value, resp.StatusCode)
		}
	}
}

// TestCancelFromAnotherSession: a cancel naming the same id in another
// session touches nothing.
func TestCancelFromAnotherSession(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up := newUpstream(t, &mcp.StreamableHTTPOptions{})
	sc := &httpx.Sidecar{Upstream: up.url}
	url := serveSidecar(t, sc)
	a, b := &rawClient{t: t, url: url}, &rawClient{t: t, url: url}
	a.initialize()
	b.initialize()
	resp := a.post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait_cancel","arguments":{"key":"a"},"_meta":{"progressToken":"a"}}}`)
	stream := events(resp.Body)
	<-stream // progress 1
	r := b.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`)
	r.Body.Close()
	// b's cancel must not reach a's request (decided before its 202: dropped,
	// and a's request still in flight); a's own cancel does.
	if st, n := sc.Stats(), sc.InFlight(); st.CancelsDropped != 1 || st.CancelsForwarded != 0 || n != 1 {
		t.Fatalf("after another session's cancel: %+v, %d in flight; want it dropped, and a's request in flight", st, n)
	}
	r = a.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`)
	r.Body.Close()
	if key := <-up.sawCancel; key != "a" {
		t.Errorf("upstream cancelled %q", key)
	}
	for m := range stream {
		t.Errorf("client got %v after cancelling", m)
	}
}

// TestJSONResponseUpstream: an upstream that answers with JSON rather than a
// stream; a cancelled request's late answer is held back and the POST gets
// an event stream that ends without a message (a request is never answered
// 202).
func TestJSONResponseUpstream(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up := newUpstream(t, &mcp.StreamableHTTPOptions{JSONResponse: true})
	c := &rawClient{t: t, url: startSidecar(t, up.url, proxy.TrackerOptions{})}
	c.initialize()
	done := make(chan *http.Response, 1)
	go func() {
		done <- c.post(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"wait_cancel","arguments":{"key":"j"}}}`)
	}()
	// With JSON responses there is no progress to wait for: wait until the
	// tool runs upstream, so that the cancel cannot overtake its request.
	<-up.started
	r := c.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}`)
	r.Body.Close()
	<-up.sawCancel
	resp := <-done
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// A request is never answered 202: an event stream that ends empty.
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" || len(body) != 0 {
		t.Errorf("cancelled call answered %d %q %q, want 200, an event stream and no message", resp.StatusCode,
			resp.Header.Get("Content-Type"), body)
	}
}

// TestDeleteCancelsInFlight: DELETE of a session cancels its requests in
// flight upstream before the session ends.
func TestDeleteCancelsInFlight(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up := newUpstream(t, &mcp.StreamableHTTPOptions{})
	c := &rawClient{t: t, url: startSidecar(t, up.url, proxy.TrackerOptions{})}
	c.initialize()
	resp := c.post(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"wait_cancel","arguments":{"key":"d"},"_meta":{"progressToken":"d"}}}`)
	stream := events(resp.Body)
	<-stream
	req, _ := http.NewRequest("DELETE", c.url, nil)
	req.Header.Set("Mcp-Session-Id", c.session)
	del, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	del.Body.Close()
	if del.StatusCode >= 300 {
		t.Errorf("DELETE answered %d", del.StatusCode)
	}
	if key := <-up.sawCancel; key != "d" {
		t.Errorf("upstream cancelled %q", key)
	}
	for m := range stream {
		t.Errorf("client got %v after its session ended", m)
	}
}

// TestHTTPErrorAbandonsRequests: a request the upstream refuses with an
// HTTP error (its body no JSON-RPC answer) is not left in flight for ever.
func TestHTTPErrorAbandonsRequests(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"initialize"`) {
			w.Header().Set("Mcp-Session-Id", "s-1")
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"x","version":"1"}}}`)
			return
		}
		http.Error(w, "no such tool, and no JSON-RPC either", http.StatusBadRequest)
	}))
	defer srv.Close()
	sc := &httpx.Sidecar{Upstream: srv.URL}
	c := &rawClient{t: t, url: serveSidecar(t, sc)}
	c.initialize()
	resp := c.post(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"x"}}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("status %d, want the upstream's 400", resp.StatusCode)
	}
	if n := sc.InFlight(); n != 0 {
		t.Errorf("%d requests still in flight after the upstream refused them", n)
	}
}

// TestCancelSources: every cancel the sidecar sends upstream is reported
// with where it came from, for the metrics, and the POSTed one with how
// long the upstream took to take it.
func TestCancelSources(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up := newUpstream(t, &mcp.StreamableHTTPOptions{})
	sources := make(chan string, 8)
	notified := make(chan time.Duration, 8)
	c := &rawClient{t: t, url: serveSidecar(t, &httpx.Sidecar{Upstream: up.url, OnCancel: func(s string) { sources <- s },
		OnNotified: func(d time.Duration) { notified <- d }})}
	c.initialize()
	call := func(id int) <-chan map[string]any {
		resp := c.post(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"wait_cancel","arguments":{"key":"k%d"},"_meta":{"progressToken":%d}}}`, id, id, id))
		ch := events(resp.Body)
		<-ch
		return ch
	}
	call(1)
	c.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`).Body.Close()
	if got := <-sources; got != "client" {
		t.Errorf("posted cancel reported as %q, want client", got)
	}
	<-up.sawCancel
	if d := <-notified; d <= 0 {
		t.Errorf("the upstream took the cancel after %v", d)
	}
	call(2)
	req, _ := http.NewRequest("DELETE", c.url, nil)
	req.Header.Set("Mcp-Session-Id", c.session)
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := <-sources; got != "session_end" {
		t.Errorf("DELETE's cancel reported as %q, want session_end", got)
	}
}

// TestUnconfirmedSessionForgotten: a POST naming a session this sidecar
// never saw registers it on sight; when that POST fails before the
// upstream answers (the upstream crashed), the session is forgotten, not
// kept holding a slot until http.session_idle. Before, it was kept (about
// 1,900 per load run with upstream crashes).
func TestUnconfirmedSessionForgotten(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	dead := deadURL()
	sc := &httpx.Sidecar{Upstream: dead}
	c := &rawClient{t: t, url: serveSidecar(t, sc), session: "from-before-the-crash"}
	if _, code, _ := errorOf(t, c.post(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)); code != proxy.CodeServerGone {
		t.Errorf("code %d, want %d", code, proxy.CodeServerGone)
	}
	if n := sc.Sessions(); n != 0 {
		t.Errorf("%d sessions kept after a POST the upstream never answered", n)
	}
}

// deadURL is an MCP endpoint's URL on a loopback port nothing listens on.
func deadURL() string {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close() // nothing listens there now
	return "http://" + ln.Addr().String() + "/mcp"
}

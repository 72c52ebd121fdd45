package httpx_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
)

// TestRelayedSessionsCap: relayed sessions have a cap of their own (they
// had none): an initialize beyond it gets 503 with Retry-After and never
// reaches the upstream, and no session is evicted for it; once a session
// ends, there is room again.
func TestRelayedSessionsCap(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// TestLegacyWaitEndsWithTheFirstMessage: a 2026-07-28 client on the old
// HTTP+SSE transport never POSTs initialize (its first request is
// server/discover); its stream was closed at http.legacy_init_wait in the
// middle of its work (the go-sdk client over SSE lost its session after 10
// s). Any first message ends the wait, on every upstream kind: after the
// wait has passed, the stream still carries the answer to a ping.
func TestLegacyWaitEndsWithTheFirstMessage(t *testing.T) {
	t.Parallel()
	kinds := map[string]func(fake *clock.Fake) string{
		"stdio server": func(fake *clock.Fake) string {
			url := childSidecar(t, &httpx.Children{}, func(sc *httpx.Sidecar) {
				sc.Legacy, sc.Clock = &httpx.Legacy{InitWait: 10 * time.Second}, fake
			})
			return strings.TrimSuffix(url, "/mcp")
		},
	}
	for _, sse := range []bool{true, false} {
		name := map[bool]string{true: "HTTP+SSE upstream", false: "Streamable HTTP upstream"}[sse]
		kinds[name] = func(fake *clock.Fake) string {
			_, url := autoSidecar(t, sse, nil, zap.NewNop(), func(sc *httpx.Sidecar) {
				sc.Legacy.InitWait, sc.Clock = 10*time.Second, fake
			})
			return strings.TrimSuffix(url, "/mcp")
		}
	}
	for name, serve := range kinds {
		t.Run(name, func(t *testing.T) {
			watchdog(t, 30*time.Second)
			fake := clock.NewFake(time.Now())
			base := serve(fake)
			resp, err := testClient.Get(base + "/sse")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			rd := bufio.NewReader(resp.Body)
			endpoint := ""
			for endpoint == "" {
				line, err := rd.ReadString('\n')
				if err != nil {
					t.Fatalf("no endpoint event: %v", err)
				}
				if data, ok := strings.CutPrefix(line, "data: "); ok {
					endpoint = base + strings.TrimSpace(data)
				}
			}
			post := func(body string) {
				r, err := testClient.Post(endpoint, "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				r.Body.Close()
				if r.StatusCode != http.StatusAccepted {
					t.Fatalf("POST %s: %d", body, r.StatusCode)
				}
			}
			post(`{"jsonrpc":"2.0","id":"discover","method":"server/discover","params":{}}`)
			fake.Advance(10 * time.Second)
			post(`{"jsonrpc":"2.0","id":"after-the-wait","method":"ping"}`)
			for {
				line, err := rd.ReadString('\n')
				if err != nil {
					t.Fatalf("the stream ended after the wait, before the ping's answer: %v", err)
				}
				if strings.Contains(line, `"after-the-wait"`) {
					return
				}
			}
		})
	}
}

// TestRelayedSessionsCapUnderConcurrentInitializes: initializes that come
// together at the relayed-session cap never overshoot it: each holds a
// slot before it goes upstream, and those beyond get 503 with Retry-After
// at once. Before, they all passed the cap's check while the upstream
// answered, the table refused the ones past it, and the sidecar crashed
// on the session it failed to register (issue 40, item 1).
func TestRelayedSessionsCapUnderConcurrentInitializes(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	const most, clients = 3, 8
	arrived, release := make(chan struct{}, clients), make(chan struct{})
	var n atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		json.NewDecoder(r.Body).Decode(&m)
		if m.Method != "initialize" {
			w.WriteHeader(http.StatusAccepted)
			return
		}
		arrived <- struct{}{}
		<-release // the initializes are all in before any is answered
		w.Header().Set("Mcp-Session-Id", fmt.Sprintf("s%d", n.Add(1)))
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"up","version":"1"}}}`)
	}))
	defer up.Close()
	sc := &httpx.Sidecar{Upstream: up.URL, UpstreamTransport: httpx.TransportStreamable, MaxRelayedSessions: most}
	url := serveSidecar(t, sc)
	results := make(chan *http.Response, clients)
	for i := range clients {
		go func() {
			results <- (&rawClient{t: t, url: url}).post(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`, i))
		}()
	}
	var got []*http.Response
	for upstream := 0; upstream+len(got) < clients; {
		select {
		case <-arrived:
			upstream++
		case resp := <-results:
			got = append(got, resp)
		}
	}
	close(release)
	for len(got) < clients {
		got = append(got, <-results)
	}
	opened := 0
	for _, resp := range got {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			opened++
		case resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "":
			t.Errorf("an initialize: %d, Retry-After %q; want 200, or 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	if opened != most || sc.Sessions() > most {
		t.Errorf("%d sessions opened, %d kept; want the cap, %d", opened, sc.Sessions(), most)
	}
}

// TestLegacyStreamsStartNoServerUntilTheyPost: an old client's event stream
// starts its server at the client's first POST, not at the GET: streams
// that never POST start none (64 of them started 64 server-everything
// processes, 4.5 GB, while mcp_cancel_proxy_children said 0), and Count
// says how many processes run (issue 40, item 7).
func TestLegacyStreamsStartNoServerUntilTheyPost(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	cs := &httpx.Children{}
	url := childSidecar(t, cs, func(sc *httpx.Sidecar) { sc.Legacy = &httpx.Legacy{} })
	sse := strings.TrimSuffix(url, "/mcp") + "/sse"
	var streams []*bufio.Reader
	endpoint := ""
	for range 3 {
		resp, err := testClient.Get(sse)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		rd := bufio.NewReader(resp.Body)
		for endpoint == "" || len(streams) < 3 {
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatalf("no endpoint event: %v", err)
			}
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				endpoint = strings.TrimSuffix(url, "/mcp") + strings.TrimSpace(data)
				break
			}
		}
		streams = append(streams, rd)
	}
	if n := cs.Count(); n != 0 {
		t.Fatalf("%d servers run for 3 streams that never POSTed, want 0", n)
	}
	r, err := testClient.Post(endpoint, "application/json", strings.NewReader(
		`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	last := streams[len(streams)-1]
	for {
		line, err := last.ReadString('\n')
		if err != nil {
			t.Fatalf("the initialize's answer never came: %v", err)
		}
		if strings.Contains(line, `"id":"init"`) {
			break
		}
	}
	if n := cs.Count(); n != 1 {
		t.Errorf("%d servers run after one stream's first POST, want 1", n)
	}
}

// TestSessionForgottenUpstreamLeavesTheCap: a session the upstream answers
// 404 for (it restarted, and forgot it) is forgotten by the sidecar too, on
// the client's GET stream as on a POST, and counts against
// http.max_relayed_sessions no more; a connection error forgets nothing
// (1,551 forgotten sessions held slots after a load run with upstream
// crashes, issue 40, item 8).
func TestSessionForgottenUpstreamLeavesTheCap(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	var forgot atomic.Bool
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Session-Id") != "" && forgot.Load() {
			http.Error(w, "unknown session", http.StatusNotFound)
			return
		}
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		var m struct {
			ID json.RawMessage `json:"id"`
		}
		json.NewDecoder(r.Body).Decode(&m)
		w.Header().Set("Mcp-Session-Id", "s1")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"up","version":"1"}}}`)
	}))
	defer up.Close()
	sc := &httpx.Sidecar{Upstream: up.URL, UpstreamTransport: httpx.TransportStreamable}
	c := &rawClient{t: t, url: serveSidecar(t, sc)}
	c.initialize()
	if sc.Sessions() != 1 {
		t.Fatalf("%d sessions after initialize, want 1", sc.Sessions())
	}
	forgot.Store(true) // the upstream restarted
	req := c.request("")
	req.Method = http.MethodGet
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || sc.Sessions() != 0 {
		t.Errorf("GET of a session the upstream forgot: %d, %d sessions kept; want 404 and none", resp.StatusCode, sc.Sessions())
	}
}

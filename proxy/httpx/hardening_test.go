package httpx_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/child"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// renamedHeaders makes a real server send its response header names as
// rename spells them (uvicorn sends them in lower case). Content-Type keeps
// its name: net/http would add one of its own beside it.
type renamedHeaders struct {
	http.ResponseWriter
	rename func(string) string
	wrote  bool
}

func (w *renamedHeaders) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		h := w.Header()
		for k, v := range h {
			if k == "Content-Type" {
				continue
			}
			delete(h, k)
			h[w.rename(k)] = v
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *renamedHeaders) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *renamedHeaders) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	w.ResponseWriter.(http.Flusher).Flush()
}

func (w *renamedHeaders) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func renaming(rename func(string) string) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(&renamedHeaders{ResponseWriter: w, rename: rename}, r)
		})
	}
}

// TestHeaderNamesInAnyCase: a server that sends its session header in lower
// or mixed case has its session adopted, so a client's cancel reaches it
// and the late progress and answer are suppressed (issue 8, item C).
func TestHeaderNamesInAnyCase(t *testing.T) {
	t.Parallel()
	spellings := map[string]func(string) string{
		"lower": strings.ToLower,
		"mixed": func(k string) string {
			b := []byte(strings.ToLower(k))
			for i := 0; i < len(b); i += 2 {
				b[i] = strings.ToUpper(string(b[i]))[0]
			}
			return string(b)
		},
	}
	for name, rename := range spellings {
		t.Run(name, func(t *testing.T) {
			watchdog(t, 30*time.Second)
			up := newUpstreamWrapped(t, &mcp.StreamableHTTPOptions{}, renaming(rename))
			postedCancelEndsTheStream(t, up, startSidecar(t, up.url, proxy.TrackerOptions{}))
		})
	}
}

// rawRequest writes a raw HTTP/1.1 request to addr and returns the status.
func rawRequest(t *testing.T, addr, request string) int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(request)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", request, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestHostAndOriginAreUnambiguous: two Host or two Origin headers are
// refused, and an absolute-form URI cannot stand in for a loopback Host
// (issue 8, item 17).
func TestHostAndOriginAreUnambiguous(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up := newUpstream(t, &mcp.StreamableHTTPOptions{})
	url := startSidecar(t, up.url, proxy.TrackerOptions{})
	addr := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/mcp")
	body := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	req := func(target string, headers ...string) string {
		return fmt.Sprintf("POST %s HTTP/1.1\r\n%s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
			target, strings.Join(headers, "\r\n"), len(body), body)
	}
	tests := []struct {
		name    string
		request string
		want    int
	}{
		{"two hosts", req("/mcp", "Host: "+addr, "Host: evil.example.com"), http.StatusBadRequest},
		{"two origins", req("/mcp", "Host: "+addr, "Origin: http://localhost", "Origin: http://evil.example.com"), http.StatusBadRequest},
		{"absolute-form URI", req("http://evil.example.com/mcp", "Host: "+addr), http.StatusForbidden},
		{"absolute-form loopback", req("http://"+addr+"/mcp", "Host: "+addr), http.StatusOK},
	}
	for _, tt := range tests {
		if got := rawRequest(t, addr, tt.request); got != tt.want {
			t.Errorf("%s: status %d, want %d", tt.name, got, tt.want)
		}
	}
}

// TestAnswerNamingNoRequestIsRelayed: an upstream that answers a request
// with an error whose id names no request in flight (FastMCP's
// "server-error", HTTP 400) has that answer reach the client as it is, not
// a 202 with an empty body (issue 8, item B).
func TestAnswerNamingNoRequestIsRelayed(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	const answer = `{"jsonrpc":"2.0","id":"server-error","error":{"code":-32600,"message":"Bad Request: No valid session ID provided"}}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		io.WriteString(w, answer)
	}))
	defer srv.Close()
	c := &rawClient{t: t, url: startSidecar(t, srv.URL, proxy.TrackerOptions{})}
	resp := c.post(`{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{}}`)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || string(body) != answer {
		t.Errorf("answered %d %q, want 400 %s", resp.StatusCode, body, answer)
	}
}

// injection is one valid JSON request, pretty-printed so that an object
// that reads as another client's cancel stands on a line of its own.
const injection = "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/list\",\"params\":\n" +
	"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":\"h4\"}}\r\n}\n"

// TestChildGetsOneLinePerMessage: whatever line breaks a POST's body holds
// (pretty-printed JSON, a trailing newline or CRLF), a stdio child receives
// each message as exactly one line, in a session and on the shared child
// (issue 8, items 1 and 2).
func TestChildGetsOneLinePerMessage(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	url := childSidecar(t, &httpx.Children{})
	for _, sessions := range []bool{true, false} {
		c := &childClient{t: t, url: url}
		if sessions {
			c.initialize()
		}
		for _, body := range []string{injection, `{"jsonrpc":"2.0","id":8,"method":"ping"}` + "\r\n", `{"jsonrpc":"2.0","id":9,"method":"ping"}` + "\n\n"} {
			if status, answer := c.post(body); status != http.StatusOK {
				t.Errorf("sessions=%v: %q answered %d %s", sessions, body, status, answer)
			}
			lines := c.received()
			if len(lines) != 1 || strings.ContainsAny(lines[0], "\r\n") {
				t.Fatalf("sessions=%v: the child received %q for %q, want one line", sessions, lines, body)
			}
			var m struct{ Method string }
			if json.Unmarshal([]byte(lines[0]), &m); m.Method != "tools/list" && m.Method != "ping" {
				t.Errorf("sessions=%v: the child received %s", sessions, lines[0])
			}
		}
	}
}

// eventually waits, up to 10 s, for cond: for states only a child process
// or the kernel decides when to reach.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling an outside state, bounded above
	}
}

// leaveHanging starts a call the child never answers, and leaves.
func (c *childClient) leaveHanging() {
	c.t.Helper()
	c.hangingCall()()
}

// hangingCall starts a call that never ends, and returns how to leave it:
// until then its stream stays open.
func (c *childClient) hangingCall() (leave func()) {
	c.t.Helper()
	req, _ := http.NewRequest("POST", c.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"hang"}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", c.session)
	tr := &http.Transport{}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		c.t.Fatal(err)
	}
	return func() { // headers came at once; the client goes away
		resp.Body.Close()
		tr.CloseIdleConnections()
	}
}

// TestChildSessionSlots: only initialize opens a session; a session whose
// client left in the middle of a call no longer holds its slot: at the cap
// the least recently used idle session is evicted, and the idle sweep reaps
// it whatever is in flight (issue 8, item 3).
func TestChildSessionSlots(t *testing.T) {
	t.Parallel()
	watchdog(t, 60*time.Second)
	t.Run("only initialize opens a session", func(t *testing.T) {
		cs := &httpx.Children{}
		c := &childClient{t: t, url: childSidecar(t, cs, func(sc *httpx.Sidecar) { sc.MaxSessions = 1 })}
		if status, _ := c.post(`[{"jsonrpc":"2.0","method":"notifications/initialized"}]`); status != http.StatusBadRequest {
			t.Errorf("a sessionless batch: %d, want 400", status)
		}
		if status, _ := c.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`); status != http.StatusAccepted {
			t.Errorf("a sessionless notification: %d, want 202", status)
		}
		if n := cs.Count(); n != 0 || c.session != "" {
			t.Errorf("%d children, session %q, after no initialize", n, c.session)
		}
	})
	t.Run("evict the least recently used idle session", func(t *testing.T) {
		url := childSidecar(t, &httpx.Children{}, func(sc *httpx.Sidecar) { sc.MaxSessions, sc.SessionIdle = 2, time.Hour })
		for range 2 {
			c := &childClient{t: t, url: url}
			c.initialize()
			c.leaveHanging()
		}
		third := &childClient{t: t, url: url}
		const init = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
		eventually(t, "a third session", func() bool { status, _ := third.post(init); return status == http.StatusOK })
	})
	t.Run("idle sweep whatever is in flight", func(t *testing.T) {
		clk := clock.NewFake(time.Now())
		cs := &httpx.Children{}
		var sc *httpx.Sidecar
		c := &childClient{t: t, url: childSidecar(t, cs, func(s *httpx.Sidecar) { sc, s.SessionIdle, s.Clock = s, time.Hour, clk })}
		c.initialize()
		leave := c.hangingCall()
		// The call's headers come before its session has decided it; the
		// session decides in order, so once a later message is answered
		// the call is in flight.
		c.received()
		clk.Advance(2 * time.Hour) // the stream is still open: the session stays
		if cs.Count() != 1 || sc.Sessions() != 1 || sc.InFlight() != 1 {
			t.Fatalf("%d children, %d sessions, %d in flight; want the session's call", cs.Count(), sc.Sessions(), sc.InFlight())
		}
		leave()
		// The sweep runs each quarter hour of the fake clock; the stream's
		// end reaches the sidecar when it reaches it.
		eventually(t, "the abandoned session reaped", func() bool { clk.Advance(15 * time.Minute); return cs.Count() == 0 })
	})
}

// TestSharedChildRefusesTwoProgressTokens: a request carrying a progress
// token both in params and in params._meta is refused; otherwise one would
// reach the shared child unrenamed and the server could report progress
// under another client's token (issue 8, item 4).
func TestSharedChildRefusesTwoProgressTokens(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	c := &childClient{t: t, url: childSidecar(t, &httpx.Children{})}
	status, body := c.post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","progressToken":"ht1","_meta":{"progressToken":"mine"}}}`)
	if status != http.StatusBadRequest || !strings.Contains(body, "-32600") {
		t.Errorf("answered %d %s, want 400 and -32600", status, body)
	}
	if lines := c.received(); len(lines) != 0 {
		t.Errorf("the shared child received %q", lines)
	}
}

// TestUnreachableUpstreamIsLogged: besides the client's JSON-RPC error,
// the operator is told, at error level (issue 8, item 19).
func TestUnreachableUpstreamIsLogged(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	dead := deadURL()
	core, logs := observer.New(zapcore.ErrorLevel)
	c := &rawClient{t: t, url: serveSidecar(t, &httpx.Sidecar{Upstream: dead, Logger: zap.New(core)})}
	c.post(`{"jsonrpc":"2.0","id":"x","method":"tools/list"}`).Body.Close()
	if n := logs.FilterMessage("upstream unreachable").Len(); n != 1 {
		t.Errorf("%d error lines about the unreachable upstream, want 1: %v", n, logs.All())
	}
}

// deafServer answers initialize, then never reads its stdin again.
var deafServer = []string{"sh", "-c", `read l; printf '%s\n' '{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"deaf","version":"1"}}}'; exec sleep 600`}

// TestChildThatStopsReadingIsStopped: a child that no longer reads its
// stdin, with more than the outbox holds queued for it, is still stopped
// when its session is deleted (issue 8, item 8).
func TestChildThatStopsReadingIsStopped(t *testing.T) {
	t.Parallel()
	watchdog(t, 60*time.Second)
	cs := &httpx.Children{Dial: &upstream.Command{Argv: deafServer, Options: child.Options{TermAfter: 200 * time.Millisecond, KillAfter: 200 * time.Millisecond}}}
	c := &childClient{t: t, url: childSidecar(t, cs)}
	c.post(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	// Messages bigger than the outbox holds (it takes one whole while
	// nothing else waits, besides the one being written), then one more:
	// the relay then waits for room that a child not reading never makes.
	big := `{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"` + strings.Repeat("x", 6<<20) + `"}}`
	for _, note := range []string{big, big, `{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"x"}}`} {
		if status, _ := c.post(note); status != http.StatusAccepted {
			t.Fatalf("a notification answered %d", status)
		}
	}
	c.delete()
	eventually(t, "the deaf child stopped", func() bool { return cs.Count() == 0 })
}

// TestSessionWithACallInFlightIsKept: however idle a session is by the
// clock, one with a call in flight is not forgotten when the idle sweep
// runs (an idle one is), so its cancel still reaches the upstream and the
// late answer is suppressed (issue 8, item 9).
func TestSessionWithACallInFlightIsKept(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up := newUpstream(t, &mcp.StreamableHTTPOptions{})
	clk := clock.NewFake(time.Now())
	sc := &httpx.Sidecar{Upstream: up.url, SessionIdle: time.Minute, Clock: clk}
	url := serveSidecar(t, sc)
	a := &rawClient{t: t, url: url}
	a.initialize()
	(&rawClient{t: t, url: url}).initialize() // a session that stays idle
	resp := a.post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait_cancel","arguments":{"key":"kept"},"_meta":{"progressToken":"tok"}}}`)
	stream := events(resp.Body)
	<-stream               // progress: the call runs
	clk.Advance(time.Hour) // the sweeps run
	if n := sc.Sessions(); n != 1 {
		t.Errorf("%d sessions after an hour, want 1: the one with a call in flight", n)
	}
	a.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`).Body.Close()
	if key := <-up.sawCancel; key != "kept" {
		t.Errorf("upstream cancelled %q", key)
	}
	eventually(t, "the stream ends after the cancel's grace", func() bool {
		clk.Advance(time.Second)
		select {
		case m, ok := <-stream:
			if ok {
				t.Errorf("client got %v after cancelling", m)
			}
			return !ok
		default:
			return false
		}
	})
}

// TestClosedStreamCancelsAWaitingRequest: in protocol 2026-07-28, a client
// that closes its stream while its request waits for a max_concurrent slot
// cancels it before dispatch: it is never sent, and the audit says so
// (issue 8, item 10).
func TestClosedStreamCancelsAWaitingRequest(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up := newUpstream(t, &mcp.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true})
	target, sp := spied(t, up.url)
	p := policy.Defaults()
	p.Rules = []policy.Rule{{Tool: "wait_cancel", MaxConcurrent: 1}}
	waits := &waitMetrics{waiting: make(chan struct{}, 4)}
	recs := make(chan *policy.Record, 8)
	e, err := policy.New(policy.Options{Policy: p, Audit: policy.Audit{Path: "off"}, Logger: zap.NewNop(), Metrics: waits,
		OnAudit: func(r *policy.Record) { recs <- r }})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	url := serveSidecar(t, &httpx.Sidecar{Upstream: target, Governor: e.Governor})
	addr := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/mcp")
	call := func(id int, key string) net.Conn {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"wait_cancel","arguments":{"key":%q},`+
			`"_meta":{"progressToken":%q,"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`, id, key, key)
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
			"MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: wait_cancel\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body)
		return conn
	}
	first := call(1, "a")
	defer first.Close()
	<-up.started
	second := call(2, "b")
	<-waits.waiting
	second.Close() // the cancel, while it waits
	if r := <-recs; r.Status != policy.StatusNotDispatched || r.Source != "disconnect" {
		t.Errorf("audit of the waiting request: status %q source %q", r.Status, r.Source)
	}
	first.Close() // the cancel of the running one
	if key := <-up.sawCancel; key != "a" {
		t.Errorf("upstream cancelled %q", key)
	}
	third := call(3, "c")
	defer third.Close()
	<-up.started
	if sp.saw(`"key":"b"`) {
		t.Error("the request cancelled while waiting reached the upstream")
	}
}

// TestLoneCRLineEndsCannotSmuggleALateAnswer: an upstream event whose lines
// end in a lone "\r" (legal SSE) is read as the WHATWG rules say, so a late
// answer hidden behind a comment is suppressed like any other (issue 8,
// item 11).
func TestLoneCRLineEndsCannotSmuggleALateAnswer(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	cancelled := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Mcp-Session-Id", "s1")
		switch {
		case strings.Contains(string(body), `"initialize"`):
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"cr","version":"1"}}}`)
		case strings.Contains(string(body), `"tools/call"`):
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"t\",\"progress\":1}}\n\n")
			w.(http.Flusher).Flush()
			<-cancelled
			io.WriteString(w, ": x\rdata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"late\":true}}\r\r\n\n")
			w.(http.Flusher).Flush()
		case strings.Contains(string(body), `"notifications/cancelled"`):
			close(cancelled)
			w.WriteHeader(http.StatusAccepted)
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	defer srv.Close()
	c := &rawClient{t: t, url: startSidecar(t, srv.URL, proxy.TrackerOptions{})}
	c.initialize()
	resp := c.post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":"t"}}}`)
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	if progress, err := rd.ReadString('}'); err != nil || !strings.Contains(progress, "notifications/progress") {
		t.Fatalf("first event %q, %v", progress, err)
	}
	c.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`).Body.Close()
	rest, _ := io.ReadAll(rd) // the stream ends after the grace
	if strings.Contains(string(rest), `"late"`) {
		t.Errorf("the client's stream carried the late answer: %q", rest)
	}
}

// TestBrokenUpstreamStreamAnswersTheRequest: an upstream stream that dies
// in the middle, ends in the middle of an event, or sends an event over the
// size limit ends the client's stream with the proxy's error for the
// request (which closes its ledger entry), logged once (issue 8, item 12).
func TestBrokenUpstreamStreamAnswersTheRequest(t *testing.T) {
	t.Parallel()
	const progress = "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"t\",\"progress\":1}}\n\n"
	breaks := map[string]func(w http.ResponseWriter){
		"dies mid-stream": func(w http.ResponseWriter) { panic(http.ErrAbortHandler) },
		"event cut off":   func(w http.ResponseWriter) { io.WriteString(w, `data: {"jsonrpc":"2.0","id":1,"res`) },
		"event too large": func(w http.ResponseWriter) { io.WriteString(w, "data: \""+strings.Repeat("x", 4<<10)+"\"\n\n") },
	}
	for name, breakIt := range breaks {
		t.Run(name, func(t *testing.T) {
			watchdog(t, 30*time.Second)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, progress)
				w.(http.Flusher).Flush()
				breakIt(w)
			}))
			defer srv.Close()
			core, logs := observer.New(zapcore.ErrorLevel)
			sc := &httpx.Sidecar{Upstream: srv.URL, MaxBodySize: 2 << 10, Logger: zap.New(core)}
			c := &rawClient{t: t, url: serveSidecar(t, sc)}
			var got []map[string]any
			for m := range events(c.post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":"t"}}}`).Body) {
				got = append(got, m)
			}
			last := got[len(got)-1]
			e, _ := last["error"].(map[string]any)
			if len(got) != 2 || last["id"] != float64(1) || e == nil || e["code"] != float64(proxy.CodeServerGone) {
				t.Fatalf("client got %v, want the progress, then error -32000 for id 1", got)
			}
			if data, _ := e["data"].(map[string]any); data["proxy"] != "mcp-cancel-proxy" {
				t.Errorf("error %v does not name the proxy", e)
			}
			if n := logs.FilterMessage("upstream stream broke").Len(); n != 1 {
				t.Errorf("%d log lines about the break, want 1: %v", n, logs.All())
			}
		})
	}
}

// TestCleanStreamEndLogsNoError: a request without a session, answered on
// an event stream that then ends cleanly, is no broken stream: the client
// gets its answer alone, and nothing is logged at error level (each such
// request logged "upstream stream broke" once, when an unanswered end
// became an error).
func TestCleanStreamEndLogsNoError(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n")
	}))
	defer srv.Close()
	core, logs := observer.New(zapcore.ErrorLevel)
	c := &rawClient{t: t, url: serveSidecar(t, &httpx.Sidecar{Upstream: srv.URL, Logger: zap.New(core)})}
	var got []map[string]any
	for m := range events(c.post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`).Body) {
		got = append(got, m)
	}
	if len(got) != 1 || got[0]["result"] == nil {
		t.Errorf("client got %v, want the answer alone", got)
	}
	if logs.Len() != 0 {
		t.Errorf("logged at error level: %v", logs.All())
	}
}

// TestEventMemoryIsBounded: an upstream event larger than what is left of
// the sidecar's event memory ends the stream with the proxy's error for
// the request, not with the process's memory (issue 8, item 13).
func TestEventMemoryIsBounded(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"text\":\""+strings.Repeat("x", 1<<20)+"\"}}\n\n")
	}))
	defer srv.Close()
	c := &rawClient{t: t, url: serveSidecar(t, &httpx.Sidecar{Upstream: srv.URL, EventMemory: 1 << 20})}
	var got []map[string]any
	for m := range events(c.post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`).Body) {
		got = append(got, m)
	}
	if len(got) != 1 || got[0]["error"] == nil || !strings.Contains(fmt.Sprint(got[0]["error"]), "limits.event_memory") {
		t.Errorf("client got %v, want the proxy's error naming limits.event_memory", got)
	}
}

// TestUpstreamHeadersStayOutOfErrors: an upstream whose response headers
// are too large for the sidecar gets the client an error that says so,
// without the headers, which reach neither the client nor the log (issue
// 8, item 15).
func TestUpstreamHeadersStayOutOfErrors(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				bufio.NewReader(conn).ReadString('}') // the request, more or less
				io.WriteString(conn, "HTTP/1.1 200 OK\r\nX-Session-Secret: hunter2-"+strings.Repeat("x", 16<<10)+"\r\nContent-Length: 0\r\n\r\n")
			}()
		}
	}()
	core, logs := observer.New(zapcore.DebugLevel)
	c := &rawClient{t: t, url: serveSidecar(t, &httpx.Sidecar{Upstream: "http://" + ln.Addr().String() + "/mcp", Logger: zap.New(core)})}
	resp := c.post(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "-32000") || strings.Contains(string(body), "hunter2") {
		t.Errorf("client got %s", body)
	}
	for _, e := range logs.All() {
		if strings.Contains(fmt.Sprint(e.Message, e.Context), "hunter2") {
			t.Errorf("log line %q %v shows the upstream's headers", e.Message, e.Context)
		}
	}
}

// TestStoppingAChildCancelsItsCalls: a sidecar that stops a stdio
// session's child (here for DELETE) cancels the calls in flight on the
// child first, and their clients get -32000 (issue 8, item 7).
func TestStoppingAChildCancelsItsCalls(t *testing.T) {
	watchdog(t, 30*time.Second)
	record := filepath.Join(t.TempDir(), "received")
	t.Setenv("MCP_ECHO_RECORD", record)
	cs := &httpx.Children{}
	c := &childClient{t: t, url: childSidecar(t, cs)}
	c.initialize()
	answer := make(chan string, 1)
	go func() {
		_, body := c.post(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"hang"}}`)
		answer <- body
	}()
	eventually(t, "the call reached the child", func() bool {
		data, _ := os.ReadFile(record)
		return strings.Contains(string(data), `"hang"`)
	})
	c.delete()
	if body := <-answer; !strings.Contains(body, `"id":5`) || !strings.Contains(body, "-32000") {
		t.Errorf("the call's client got %q, want -32000", body)
	}
	eventually(t, "the child gone", func() bool { return cs.Count() == 0 })
	data, _ := os.ReadFile(record)
	if !strings.Contains(string(data), `"method":"notifications/cancelled","params":{"requestId":5,"reason":"session deleted"}`) {
		t.Errorf("the child read:\n%s\nwant the cancel of call 5", data)
	}
}

// TestClosedStreamCancelsBeforeHeaders: in protocol 2026-07-28, a client
// that closes its stream while the server has sent nothing yet, not even
// its headers (the go-sdk's server sends them with the first message),
// cancels the request: the sidecar closes the POST's connection, which
// the server takes as the cancel, and the audit says the client's close
// did it.
func TestClosedStreamCancelsBeforeHeaders(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up := newUpstream(t, &mcp.StreamableHTTPOptions{Stateless: true, PropagateRequestCancellation: true})
	recs := make(chan *policy.Record, 8)
	e, err := policy.New(policy.Options{Policy: policy.Defaults(), Audit: policy.Audit{Path: "off"}, Logger: zap.NewNop(),
		OnAudit: func(r *policy.Record) { recs <- r }})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	url := serveSidecar(t, &httpx.Sidecar{Upstream: up.url, Governor: e.Governor})
	addr := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/mcp")
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"quiet","arguments":{"key":"q"},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
		"MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: quiet\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body)
	<-up.started
	conn.Close() // the cancel
	if key := <-up.quietCancel; key != "q" {
		t.Errorf("upstream cancelled %q", key)
	}
	if r := <-recs; r.Source != "disconnect" {
		t.Errorf("audit: source %q, want disconnect", r.Source)
	}
}

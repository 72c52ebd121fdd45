package httpx_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream/upstreamtest"
)

// spy records the bodies of the POSTs that reach the upstream.
type spy struct {
	mu     sync.Mutex
	bodies []string
}

func (sp *spy) saw(part string) bool {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	for _, b := range sp.bodies {
		if strings.Contains(b, part) {
			return true
		}
	}
	return false
}

// spied puts a recording reverse proxy in front of the upstream at target.
func spied(t *testing.T, target string) (string, *spy) {
	sp := &spy{}
	u, _ := url.Parse(target)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		sp.mu.Lock()
		sp.bodies = append(sp.bodies, string(body))
		sp.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + u.Path, sp
}

// TestMaxConcurrentThroughTheSidecar: a request beyond the rule's cap waits
// in the sidecar; cancelled while waiting, it is never sent upstream and
// its stream ends without an answer; the next one goes once a slot frees.
func TestMaxConcurrentThroughTheSidecar(t *testing.T) {
	t.Parallel()
	h := holdSecond(t)
	c, up, sp, first, second := h.c, h.up, h.sp, h.first, h.second
	// The second waits in the sidecar; its cancel withdraws it.
	c.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`).Body.Close()
	resp := <-second
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || len(bytes.TrimSpace(body)) != 0 {
		t.Errorf("the withdrawn request's answer: %d %q, want an empty stream", resp.StatusCode, body)
	}
	c.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`).Body.Close()
	for range first {
	}
	third := events(c.post(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"wait_cancel","arguments":{"key":"c"},"_meta":{"progressToken":"c"}}}`).Body)
	<-up.started
	c.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`).Body.Close()
	for range third {
	}
	if sp.saw(`"key":"b"`) || sp.saw(`"requestId":2`) {
		t.Error("the request cancelled while waiting, or its cancel, reached the upstream")
	}
	if !sp.saw(`"key":"c"`) {
		t.Error("the next request never went")
	}
}

// TestHeldRequestAnsweredAtShutdown: a request waiting in the sidecar for
// a max_concurrent slot when the sidecar shuts down is withdrawn (never
// sent upstream) and answered, as the running one is, with the proxy's
// -32000 saying why; its POST does not wait for ever for a slot.
func TestHeldRequestAnsweredAtShutdown(t *testing.T) {
	t.Parallel()
	h := holdSecond(t)
	sp, first, second := h.sp, h.first, h.second
	h.sc.Cleanup("the proxy is shutting down")
	resp := <-second
	body, _ := io.ReadAll(resp.Body)
	if !bytes.Contains(body, []byte(`"id":2`)) || !bytes.Contains(body, []byte(`-32000`)) || !bytes.Contains(body, []byte("shutting down")) {
		t.Errorf("the held request's answer: %d %q, want -32000 for id 2", resp.StatusCode, body)
	}
	var last map[string]any
	for ev := range first {
		last = ev
	}
	if e, _ := last["error"].(map[string]any); e == nil || e["code"] != float64(-32000) {
		t.Errorf("the running request's last message: %v, want the proxy's -32000", last)
	}
	if sp.saw(`"key":"b"`) || sp.saw(`"requestId":2`) {
		t.Error("the held request, or a cancel of it, reached the upstream")
	}
}

// heldSecond is a sidecar whose policy lets one wait_cancel call run at a
// time, with one call running (first) and a second one (whose POST's
// answer second will bring) waiting in the sidecar for its slot.
type heldSecond struct {
	c      *rawClient
	sc     *httpx.Sidecar
	up     *sdkServer
	sp     *spy
	first  <-chan map[string]any
	second chan *http.Response
}

// holdSecond starts a heldSecond, and returns once the second call waits.
func holdSecond(t *testing.T) *heldSecond {
	watchdog(t, 30*time.Second)
	h := &heldSecond{up: newUpstream(t, &mcp.StreamableHTTPOptions{}), second: make(chan *http.Response, 1)}
	var target string
	target, h.sp = spied(t, h.up.url)
	p := policy.Defaults()
	p.Rules = []policy.Rule{{Tool: "wait_cancel", MaxConcurrent: 1}}
	waits := &waitMetrics{waiting: make(chan struct{}, 4)}
	e, err := policy.New(policy.Options{Policy: p, Audit: policy.Audit{Path: "off"}, Logger: zaptest.NewLogger(t), Metrics: waits})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	h.sc = &httpx.Sidecar{Upstream: target, Governor: e.Governor}
	h.c = &rawClient{t: t, url: serveSidecar(t, h.sc)}
	h.c.initialize()
	h.first = events(h.c.post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"wait_cancel","arguments":{"key":"a"},"_meta":{"progressToken":"a"}}}`).Body)
	<-h.up.started
	go func() {
		h.second <- h.c.post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait_cancel","arguments":{"key":"b"}}}`)
	}()
	<-waits.waiting
	return h
}

// waitMetrics tells when a request starts waiting for a slot.
type waitMetrics struct{ waiting chan struct{} }

func (w *waitMetrics) DeadlineFired()          {}
func (w *waitMetrics) ClientTimeoutFired(bool) {}
func (w *waitMetrics) TasksHosted(int64, int)  {}
func (w *waitMetrics) TaskDropped()            {}
func (w *waitMetrics) HookRan(string, bool)    {}
func (w *waitMetrics) Orphan()                 {}
func (w *waitMetrics) Orphans(int)             {}
func (w *waitMetrics) Forwarded(bool)          {}
func (w *waitMetrics) CancelSettled(string)    {}
func (w *waitMetrics) AuditFailed()            {}
func (w *waitMetrics) StoreDamaged()           {}
func (w *waitMetrics) AnswersKept(int64, int)  {}
func (w *waitMetrics) AnswerDropped()          {}
func (w *waitMetrics) HooksWaiting(int)        {}
func (w *waitMetrics) Waiting(delta int) {
	if delta > 0 {
		w.waiting <- struct{}{}
	}
}

// gate is a sidecar, with the policy of rule, in front of a go-sdk server
// whose tool gate signals its start and answers only once released, deaf
// to the cancel (JSON answers or event streams); with a client whose
// session is open, and the policy's audit records.
type gate struct {
	c                *rawClient
	started, release chan struct{}
	recs             chan *policy.Record
}

func newGate(t *testing.T, rule policy.Rule, json bool) *gate {
	g := &gate{started: make(chan struct{}, 1), release: make(chan struct{}), recs: make(chan *policy.Record, 4)}
	s := mcp.NewServer(&mcp.Implementation{Name: "gate", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "gate"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		g.started <- struct{}{}
		<-g.release // deaf to the cancel
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done anyway"}}}, nil, nil
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{JSONResponse: json}))
	t.Cleanup(srv.Close)                                  // after the client has ended its session
	t.Cleanup(sync.OnceFunc(func() { close(g.release) })) // before: the server's Close waits for the tool
	p := policy.Defaults()
	rule.Tool, rule.OnLateResult = "gate", &policy.Hook{Exec: []string{"true"}}
	p.Rules = []policy.Rule{rule}
	e, err := policy.New(policy.Options{Policy: p, Audit: policy.Audit{Path: "off"}, Logger: zaptest.NewLogger(t),
		OnAudit: func(r *policy.Record) { g.recs <- r }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	g.c = &rawClient{t: t, url: serveSidecar(t, &httpx.Sidecar{Upstream: srv.URL, Governor: e.Governor, LateWatch: 20 * time.Second})}
	g.c.initialize()
	return g
}

// compensated ends the tool, whose call was cancelled, and checks that
// its late result reached the hook.
func (g *gate) compensated(t *testing.T) {
	g.release <- struct{}{}
	if r := <-g.recs; r.Status != policy.StatusCompensated || r.Late == nil {
		t.Errorf("audit: %+v", r)
	}
}

// TestLateJSONAnswerIsStillRead: with a JSON-answering upstream, a
// cancelled request's POST is answered after the grace, but the upstream's
// answer is still read, so that its late result reaches the hook.
func TestLateJSONAnswerIsStillRead(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	g := newGate(t, policy.Rule{}, true)
	answer := make(chan *http.Response, 1)
	go func() {
		answer <- g.c.post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gate"}}`)
	}()
	<-g.started
	g.c.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`).Body.Close()
	resp := <-answer // after the grace, before the tool ends
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Errorf("the cancelled call's POST: %d %q, want 200 and an empty event stream (never 202)", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	g.compensated(t)
}

// TestLateAnswerAfterADeadlineIsStillRead: a call past its deadline gets
// the proxy's timeout error at once, and the upstream's answer that comes
// after it, JSON or an event stream, is still read, so that its late
// result reaches the hook, as after a client's cancel.
func TestLateAnswerAfterADeadlineIsStillRead(t *testing.T) {
	t.Parallel()
	for _, json := range []bool{true, false} {
		t.Run(map[bool]string{true: "json", false: "sse"}[json], func(t *testing.T) {
			t.Parallel()
			watchdog(t, 30*time.Second)
			timeout := 50 * time.Millisecond
			g := newGate(t, policy.Rule{Timeout: &timeout}, json)
			resp := g.c.post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"gate"}}`)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(body), `"id":1`) || !strings.Contains(string(body), `-32001`) {
				t.Fatalf("the call past its deadline: %s, want the proxy's timeout error", body)
			}
			<-g.started
			g.compensated(t) // the tool ends now, after the deadline's answer
		})
	}
}

// deadlineMetrics tells when a deadline fires.
type deadlineMetrics struct {
	*waitMetrics
	fired chan struct{}
}

func (d deadlineMetrics) DeadlineFired() { d.fired <- struct{}{} }

// TestDeadlineRacingADroppedPost: a call's deadline passes as its server,
// which read the call, drops the connection: the client gets exactly one
// answer, the deadline's -32001 or the proxy's -32000, never an empty
// body. (A guard: the window the fix closes, a deadline that ends the
// call between the failed POST's return and its answer, is too narrow to
// hit from here; postFailed and answerJSON now end calls under the core's
// lock, as Expire does, so that it cannot open.)
func TestDeadlineRacingADroppedPost(t *testing.T) {
	t.Parallel()
	watchdog(t, 60*time.Second)
	m := deadlineMetrics{&waitMetrics{}, make(chan struct{}, 1)}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !bytes.Contains(body, []byte(`"tools/call"`)) { // server/discover: a 2025 server's answer
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jsonrpc":"2.0","id":"x","error":{"code":-32601,"message":"Method not found"}}`)
			return
		}
		<-m.fired // the deadline passed: the connection goes now
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	timeout := 10 * time.Millisecond
	p := policy.Defaults()
	p.Rules = []policy.Rule{{Tool: "job", Timeout: &timeout}}
	e, err := policy.New(policy.Options{Policy: p, Audit: policy.Audit{Path: "off"}, Logger: zaptest.NewLogger(t), Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	c := &rawClient{t: t, url: serveSidecar(t, &httpx.Sidecar{Upstream: srv.URL, UpstreamTransport: upstream.TransportStreamable, Governor: e.Governor})}
	for i := range 10 {
		id := strconv.Itoa(i + 1)
		resp := c.post(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"job"}}`)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), `"id":`+id) || !strings.Contains(string(body), "-32001") && !strings.Contains(string(body), "-32000") {
			t.Fatalf("call %s: %d %q, want the deadline's -32001 or the proxy's -32000", id, resp.StatusCode, body)
		}
	}
}

// TestDeadlineWhileAJSONAnswerIsRead: a call's deadline passes while its
// upstream's JSON answer is still coming (its headers out, its body not
// until the client has had its answer): where a hook wants the late
// result the stream lingers, the body is read on for the tracker alone,
// and the client gets the deadline's -32001. Before, the deadline's message was
// left behind and the client got an empty body.
func TestDeadlineWhileAJSONAnswerIsRead(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case bytes.Contains(body, []byte(`"initialize"`)):
			answerInitialize(w, "s")
		case bytes.Contains(body, []byte(`"tools/call"`)):
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jsonrpc":"2.0",`)
			w.(http.Flusher).Flush() // the headers and half the answer
			<-release                // the rest once the client has its answer
			io.WriteString(w, `"id":1,"result":{"content":[]}}`)
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	t.Cleanup(srv.Close)
	done := sync.OnceFunc(func() { close(release) })
	t.Cleanup(done) // before the server's Close
	timeout := 20 * time.Millisecond
	p := policy.Defaults()
	// A hook for the late result: the upstream's answer is read on after
	// the deadline (the stream lingers, Sidecar.LateWatch).
	p.Rules = []policy.Rule{{Tool: "job", Timeout: &timeout, OnLateResult: &policy.Hook{Exec: []string{"true"}}}}
	e, err := policy.New(policy.Options{Policy: p, Audit: policy.Audit{Path: "off"}, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	c := &rawClient{t: t, url: serveSidecar(t, &httpx.Sidecar{Upstream: srv.URL, UpstreamTransport: upstream.TransportStreamable, Governor: e.Governor,
		LateWatch: 20 * time.Second})}
	c.initialize()
	resp := c.post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"job"}}`)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	done()
	if !strings.Contains(string(body), `"id":1`) || !strings.Contains(string(body), "-32001") {
		t.Errorf("the call past its deadline: %d %q, want the deadline's -32001", resp.StatusCode, body)
	}
}

// TestDeadlinesRacingAnswers: calls whose answer comes about when their
// deadline passes (10 ms, answers after 8 to 12 ms), 16 clients at once:
// each gets exactly one answer, its result or the deadline's -32001, never
// an empty body. On the relay (a JSON or an event-stream answer) and on
// Streamable HTTP clients' sessions of a stdio server and of an HTTP+SSE
// server. Before, 8 of 2,400 JSON calls got an empty body: the deadline
// came after the answer was read whole and before it was decided, when its
// stream had ended and the deadline's message was dropped (stream.Finish
// now keeps it); under -race the upstream also read a POST body the
// client's next request was overwriting; and 1 event-stream call in about
// 30,000 at -cpu 4 got an empty stream (the relay took the stream's last
// message before Expire had set it). A guard, by load: it cannot time the
// window.
func TestDeadlinesRacingAnswers(t *testing.T) {
	t.Parallel()
	work := func() { time.Sleep(time.Duration(8000+rand.IntN(4000)) * time.Microsecond) } // the work: about the deadline
	for _, mode := range []string{"json", "sse", "stdio", "sse-upstream"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			watchdog(t, 60*time.Second) // once running: not the wait for a parallel slot (-cpu 1 ran one at a time)
			timeout := 10 * time.Millisecond
			p := policy.Defaults()
			p.Rules = []policy.Rule{{Tool: "job", Timeout: &timeout}}
			e, err := policy.New(policy.Options{Policy: p, Audit: policy.Audit{Path: "off"}, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(e.Shutdown)
			sc := &httpx.Sidecar{Governor: e.Governor, Logger: zap.NewNop()}
			switch mode {
			case "json", "sse":
				srv := httptest.NewServer(racingStreamable(mode, work))
				t.Cleanup(srv.Close)
				sc.Upstream = srv.URL
			case "stdio":
				sc.Children = &httpx.Children{Session: stdio.Options{Governor: e.Governor("child")},
					Dial: upstream.DialFunc(func(*zap.Logger) (upstream.Conn, error) { return racingLines(work), nil })}
			case "sse-upstream":
				srv := httptest.NewServer(racingSSE(work))
				t.Cleanup(srv.Close)
				sc.Upstream, sc.UpstreamTransport = srv.URL+"/sse", httpx.TransportSSE
				sc.Children = &httpx.Children{Session: stdio.Options{Governor: e.Governor("child")}}
			}
			url := serveSidecar(t, sc)
			var wg sync.WaitGroup
			var deadlines atomic.Int64
			for w := range 16 {
				c := &rawClient{t: t, url: url}
				c.initialize()
				wg.Go(func() {
					for i := range 100 {
						id := strconv.Itoa(w*1000 + i)
						resp := c.post(`{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"job"}}`)
						b, _ := io.ReadAll(resp.Body)
						resp.Body.Close()
						if !strings.Contains(string(b), `"id":`+id) || !strings.Contains(string(b), "-32001") && !strings.Contains(string(b), `"result"`) {
							t.Errorf("call %s: %d %q %v, want its result or the deadline's -32001", id, resp.StatusCode, b, resp.Header)
						}
						if strings.Contains(string(b), "-32001") {
							deadlines.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if deadlines.Load() == 0 {
				t.Error("no deadline passed in 1,600 calls: the test raced nothing")
			}
		})
	}
}

// racingStreamable is a Streamable HTTP server whose tools/call answers
// (JSON, or an event stream: mode) come after work.
func racingStreamable(mode string, work func()) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var m struct{ ID json.RawMessage }
		json.Unmarshal(body, &m)
		switch {
		case bytes.Contains(body, []byte(`"initialize"`)):
			answerInitialize(w, fmt.Sprint("s", rand.Int64()))
		case bytes.Contains(body, []byte(`"tools/call"`)):
			work()
			answer := `{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"content":[]}}`
			if mode == "json" {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, answer)
			} else {
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, "event: message\ndata: "+answer+"\n\n")
			}
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	})
}

// racingAnswer is the answer of a racing server to one line, after work
// for a tools/call; nil for a notification.
func racingAnswer(line []byte, work func()) []byte {
	var m struct {
		ID     json.RawMessage
		Method string
	}
	if json.Unmarshal(line, &m) != nil || m.ID == nil {
		return nil
	}
	if m.Method == "initialize" {
		return []byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"up","version":"1"}}}`)
	}
	if m.Method == "tools/call" {
		work()
	}
	return []byte(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"content":[]}}`)
}

// racingLines is a stdio server, in process, that answers each request on
// a goroutine of its own (a tools/call after work).
func racingLines(work func()) upstream.Conn {
	toR, toW := io.Pipe()
	fromR, fromW := io.Pipe()
	b := &linesBackend{in: fromR, out: toW, exited: make(chan struct{})}
	go func() {
		defer close(b.exited)
		var mu sync.Mutex // one answer written at a time
		var answering sync.WaitGroup
		sc := bufio.NewScanner(toR)
		for sc.Scan() {
			line := bytes.Clone(sc.Bytes())
			answering.Go(func() {
				if a := racingAnswer(line, work); a != nil {
					mu.Lock()
					fromW.Write(append(a, '\n'))
					mu.Unlock()
				}
			})
		}
		answering.Wait()
		fromW.Close()
	}()
	return b.conn()
}

// racingSSE is an HTTP+SSE server that answers each message on its
// session's event stream, a tools/call after work.
func racingSSE(work func()) http.Handler {
	var mu sync.Mutex
	sessions := map[string]chan []byte{}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sse", func(w http.ResponseWriter, r *http.Request) {
		id, ch := fmt.Sprint(rand.Int64()), make(chan []byte, 256)
		mu.Lock()
		sessions[id] = ch
		mu.Unlock()
		defer func() { mu.Lock(); delete(sessions, id); mu.Unlock() }()
		upstreamtest.ServeEvents(w, r, "/message?sessionId="+id, ch, nil)
	})
	mux.HandleFunc("POST /message", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		ch := sessions[r.URL.Query().Get("sessionId")]
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		if ch != nil {
			go func() {
				if a := racingAnswer(body, work); a != nil {
					select {
					case ch <- a:
					case <-time.After(5 * time.Second): // its stream is gone
					}
				}
			}()
		}
	})
	return mux
}

package httpx_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/valyala/fasthttp"
	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
)

// watchdog bounds a test (httpx.Watchdog).
var watchdog = httpx.Watchdog

// sdkServer is a real go-sdk Streamable HTTP server with one tool,
// wait_cancel: it reports progress, waits until it is cancelled, reports
// that on sawCancel, then sends progress again and answers anyway, as a
// careless server would.
type sdkServer struct {
	url       string
	started   chan struct{} // a wait_cancel call is running
	sawCancel chan string
	release   chan struct{} // closed: wait_cancel calls end without a cancel
	sayNow    chan struct{} // closed: say calls answer
	// quietCancel gets the key of each quiet call cancelled: quiet sends
	// nothing, not even its headers, until it is cancelled.
	quietCancel chan string
}

func newUpstream(t *testing.T, opts *mcp.StreamableHTTPOptions) *sdkServer {
	return newUpstreamWrapped(t, opts, nil)
}

// newUpstreamWrapped is newUpstream with the server's handler wrapped, if
// wrap is not nil: a way to make the real server misbehave on the wire.
func newUpstreamWrapped(t *testing.T, opts *mcp.StreamableHTTPOptions, wrap func(http.Handler) http.Handler) *sdkServer {
	u, s := newUpstreamServer()
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, opts)
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u.url = srv.URL
	return u
}

// newUpstreamServer returns the upstream's MCP server, not yet served.
func newUpstreamServer() (*sdkServer, *mcp.Server) {
	u := &sdkServer{started: make(chan struct{}, 8), sawCancel: make(chan string, 8), release: make(chan struct{}), sayNow: make(chan struct{}),
		quietCancel: make(chan string, 8)}
	s := mcp.NewServer(&mcp.Implementation{Name: "upstream", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "quiet"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Key string `json:"key"`
	}) (*mcp.CallToolResult, any, error) {
		u.started <- struct{}{}
		<-ctx.Done()
		u.quietCancel <- in.Key
		return nil, nil, ctx.Err()
	})
	mcp.AddTool(s, &mcp.Tool{Name: "wait_cancel"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Key string `json:"key"`
	}) (*mcp.CallToolResult, any, error) {
		tok := req.Params.GetProgressToken()
		notify := func(n float64) {
			req.Session.NotifyProgress(context.WithoutCancel(ctx), &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: n})
		}
		notify(1)
		u.started <- struct{}{}
		select {
		case <-ctx.Done():
		case <-u.release:
			return nil, nil, errors.New("released")
		}
		u.sawCancel <- in.Key
		notify(2)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "late"}}}, nil, nil
	})
	// say answers with its key, once release_say is closed: calls that
	// run at once, and whose answers tell them apart.
	mcp.AddTool(s, &mcp.Tool{Name: "say"}, func(ctx context.Context, req *mcp.CallToolRequest, in struct {
		Key string `json:"key"`
	}) (*mcp.CallToolResult, any, error) {
		u.started <- struct{}{}
		select {
		case <-u.sayNow:
		case <-ctx.Done():
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "said " + in.Key}}}, nil, nil
	})
	// ask asks the client for a sampling completion; cancelling the call
	// makes the server cancel that nested request.
	mcp.AddTool(s, &mcp.Tool{Name: "ask"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		_, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 5,
			Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}}})
		return nil, nil, err
	})
	return u, s
}

// startSidecar serves a Sidecar in front of up on a loopback port.
func startSidecar(t *testing.T, up string, tr proxy.TrackerOptions) string {
	return serveSidecar(t, &httpx.Sidecar{Upstream: up, Tracker: tr})
}

// serveSidecar serves sc, given its upstream and options, on a loopback port.
func serveSidecar(t *testing.T, sc *httpx.Sidecar) string {
	sc.CheckHost = true
	if sc.Logger == nil {
		sc.Logger = zaptest.NewLogger(t)
	}
	if sc.CancelGrace == 0 {
		sc.CancelGrace = 50 * time.Millisecond
	}
	h, err := sc.Handler()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Shutdown closes the idle keep-alive connections clients keep open.
	srv := &fasthttp.Server{Handler: h, CloseOnShutdown: true, IdleTimeout: idleServe}
	go srv.Serve(httpx.Listener(ln))
	t.Cleanup(func() {
		sc.Cleanup("the test ends") // old clients' streams end: Shutdown waits for them
		srv.Shutdown()
	})
	return "http://" + ln.Addr().String() + "/mcp"
}

// testClient is the tests' HTTP client. It opens a connection per request:
// a keep-alive connection can be closed by the sidecar's idle timer (100 ms
// here) or the client's own at the moment a request is given it, and a
// POST is not retried (the test saw "use of closed network connection",
// and "http: idle connection timeout" under load, then every later call
// of the test failed with it).
var testClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// rawClient speaks Streamable HTTP by hand, like the TypeScript SDK: it
// POSTs the cancel and leaves the request's stream open.
type rawClient struct {
	t       *testing.T
	url     string
	session string
	hc      *http.Client // nil: testClient
}

func (c *rawClient) post(body string) *http.Response {
	c.t.Helper()
	hc := c.hc
	if hc == nil {
		hc = testClient
	}
	resp, err := hc.Do(c.request(body))
	if err != nil {
		c.t.Fatalf("POST %s: %v", body, err)
	}
	return resp
}

// request is the POST of body in the client's session.
func (c *rawClient) request(body string) *http.Request {
	req, _ := http.NewRequest("POST", c.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-06-18")
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
	}
	return req
}

func (c *rawClient) initialize() { c.initializeWith(`{}`) }

func (c *rawClient) initializeWith(capabilities string) {
	resp := c.post(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":` + capabilities + `,"clientInfo":{"name":"raw","version":"1"}}}`)
	c.session = resp.Header.Get("Mcp-Session-Id")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if c.session == "" {
		c.t.Fatal("no session id from initialize")
	}
	resp = c.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	resp.Body.Close()
	c.t.Cleanup(c.end) // before the sidecar stops: it is served after
}

// end ends the session, as a client that leaves properly does (DELETE),
// so that the upstream's session ends too.
func (c *rawClient) end() {
	req, _ := http.NewRequest("DELETE", c.url, nil)
	req.Header.Set("Mcp-Session-Id", c.session)
	if resp, err := testClient.Do(req); err == nil {
		resp.Body.Close()
	}
}

// events returns a channel of the JSON-RPC messages on an SSE response,
// closed when the stream ends.
func events(body io.ReadCloser) <-chan map[string]any {
	ch := make(chan map[string]any, 16)
	go func() {
		defer close(ch)
		defer body.Close()
		rd := framing.NewSSEReader(bufio.NewReader(body), 0)
		for {
			ev, err := rd.Next()
			if err != nil {
				return
			}
			var m map[string]any
			if ev.HasData && json.Unmarshal(ev.Data, &m) == nil {
				ch <- m
			}
		}
	}()
	return ch
}

// TestPostedCancelEndsTheStream: the client POSTs a cancel and keeps the
// call's stream open. The sidecar answers 202, the upstream gets the cancel,
// and the stream ends without the late progress or response.
func TestPostedCancelEndsTheStream(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up := newUpstream(t, &mcp.StreamableHTTPOptions{})
	postedCancelEndsTheStream(t, up, startSidecar(t, up.url, proxy.TrackerOptions{}))
}

// postedCancelEndsTheStream runs a wait_cancel call of up through the
// sidecar at url, POSTs its cancel, and checks that the cancel is answered
// 202, reaches the upstream, and that the stream ends with nothing late.
func postedCancelEndsTheStream(t *testing.T, up *sdkServer, url string) {
	t.Helper()
	c := &rawClient{t: t, url: url}
	c.initialize()
	resp := c.post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait_cancel","arguments":{"key":"a"},"_meta":{"progressToken":"tok"}}}`)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("tools/call answered with %q, want an event stream", ct)
	}
	stream := events(resp.Body)
	if m := <-stream; m["method"] != "notifications/progress" {
		t.Fatalf("first message %v, want progress", m)
	}
	cancel := c.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2,"reason":"stop"}}`)
	cancel.Body.Close()
	if cancel.StatusCode != http.StatusAccepted {
		t.Errorf("cancel answered %d, want 202", cancel.StatusCode)
	}
	if key := <-up.sawCancel; key != "a" {
		t.Errorf("upstream cancelled %q", key)
	}
	for m := range stream { // ends: the sidecar closes it after the grace
		t.Errorf("client got %v after cancelling", m)
	}
}

// TestGoSDKClientCancel drives the sidecar with the go-sdk client, which
// POSTs the cancel and closes the call's stream, against stateful and
// stateless go-sdk servers.
func TestGoSDKClientCancel(t *testing.T) {
	t.Parallel()
	for _, stateless := range []bool{false, true} {
		t.Run(fmt.Sprintf("stateless=%v", stateless), func(t *testing.T) {
			watchdog(t, 30*time.Second)
			up := newUpstream(t, &mcp.StreamableHTTPOptions{Stateless: stateless, PropagateRequestCancellation: stateless})
			url := startSidecar(t, up.url, proxy.TrackerOptions{})
			goSDKClientCancels(t, up, &mcp.StreamableClientTransport{Endpoint: url, DisableStandaloneSSE: true})
		})
	}
}

// goSDKClientCancels has a go-sdk client cancel a wait_cancel call through
// the sidecar: the upstream sees the cancel, the client gets no progress
// after it, and the session goes on.
func goSDKClientCancels(t *testing.T, up *sdkServer, tr mcp.Transport) {
	t.Helper()
	progressed := make(chan struct{}, 4)
	client := mcp.NewClient(&mcp.Implementation{Name: "go-sdk", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progressed <- struct{}{} },
	})
	cs, err := client.Connect(context.Background(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		p := &mcp.CallToolParams{Name: "wait_cancel", Arguments: map[string]any{"key": "g"}}
		p.SetProgressToken("g-tok")
		_, err := cs.CallTool(ctx, p)
		errc <- err
	}()
	<-progressed
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("CallTool = %v, want context canceled", err)
	}
	if key := <-up.sawCancel; key != "g" {
		t.Errorf("upstream cancelled %q", key)
	}
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Errorf("tools/list after the cancel: %v", err) // ping is gone in 2026-07-28
	}
	select {
	case <-progressed:
		t.Error("client got progress after cancelling")
	default:
	}
}

// nestedUpstream is a scripted server: a tools/call gets a stream that
// carries a sampling request of the server's; once the call's cancel comes,
// the server cancels its sampling request on that stream, then answers the
// call late. It records whether a sampling answer ever reached it.
func nestedUpstream(t *testing.T) (url string, sawAnswer *atomic.Bool) {
	cancelled := make(chan struct{}, 1)
	sawAnswer = new(atomic.Bool)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var m struct {
			ID     any
			Method string
		}
		json.Unmarshal(body, &m)
		switch {
		case m.Method == "initialize":
			w.Header().Set("Mcp-Session-Id", "nested")
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"n","version":"1"}}}`)
		case m.Method == "tools/call":
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"method\":\"sampling/createMessage\",\"params\":{}}\n\n")
			w.(http.Flusher).Flush()
			<-cancelled
			io.WriteString(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":\"s1\"}}\n\n")
			io.WriteString(w, "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[]}}\n\n")
		case m.Method == "notifications/cancelled":
			cancelled <- struct{}{}
			w.WriteHeader(http.StatusAccepted)
		case m.Method == "" && m.ID == "s1":
			sawAnswer.Store(true)
			w.WriteHeader(http.StatusAccepted)
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, sawAnswer
}

// TestNestedCancelReachesClientBeforeStreamEnds: the client cancels a tool
// call whose server is waiting on a sampling request of its own. The server
// cancels that nested request on the call's stream; the sidecar keeps the
// stream open for the grace, so the client gets that cancel, and never the
// call's late answer; the client's late answer to the sampling request does
// not reach the server.
func TestNestedCancelReachesClientBeforeStreamEnds(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up, sawAnswer := nestedUpstream(t)
	// A grace long enough for a loaded machine: the stream ends sooner, when
	// the server closes it.
	c := &rawClient{t: t, url: serveSidecar(t, &httpx.Sidecar{Upstream: up, CancelGrace: 10 * time.Second})}
	nestedCancelReachesClient(t, c)
	late := c.post(`{"jsonrpc":"2.0","id":"s1","result":{"role":"assistant","content":{"type":"text","text":"late"},"model":"m"}}`)
	late.Body.Close()
	if late.StatusCode != http.StatusAccepted || sawAnswer.Load() {
		t.Errorf("late sampling answer: status %d, reached the server %v; want 202 and no", late.StatusCode, sawAnswer.Load())
	}
}

// nestedCancelReachesClient calls the ask tool, which asks the client for a
// sampling completion, cancels the call once asked, and checks that the
// call's stream carries the server's cancel of that sampling request, and
// nothing else, before it ends.
func nestedCancelReachesClient(t *testing.T, c *rawClient) {
	t.Helper()
	c.initializeWith(`{"sampling":{}}`)
	resp := c.post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"ask","arguments":{}}}`)
	stream := events(resp.Body)
	asked := <-stream
	if asked["method"] != "sampling/createMessage" {
		t.Fatalf("first message %v, want the sampling request", asked)
	}
	r := c.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
	r.Body.Close()
	var got []map[string]any
	for m := range stream {
		got = append(got, m)
	}
	if len(got) != 1 || got[0]["method"] != "notifications/cancelled" {
		t.Fatalf("after the cancel the stream carried %v; want only the server's cancel of its sampling request", got)
	}
	if p, _ := got[0]["params"].(map[string]any); p["requestId"] != asked["id"] {
		t.Errorf("the server cancelled %v, want its sampling request %v", p["requestId"], asked["id"])
	}
}

// TestEventStreamsReuseUpstreamConnections: an event stream relayed to its
// end gives its upstream connection back for the next request, with JSON
// and with event-stream answers. (Closing a finished stream with an error
// once had fasthttp drop the connection: every call paid for a new dial.)
func TestEventStreamsReuseUpstreamConnections(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	for _, jsonMode := range []bool{false, true} {
		s := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "1"}, nil)
		mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo"}}}, nil, nil
		})
		var dials atomic.Int32
		srv := httptest.NewUnstartedServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
			&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: jsonMode}))
		srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				dials.Add(1)
			}
		}
		srv.Start()
		c := &rawClient{t: t, url: startSidecar(t, srv.URL, proxy.TrackerOptions{})}
		for i := range 5 {
			resp := c.post(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"echo"}}`, i))
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if !strings.Contains(string(b), `"echo"`) {
				t.Fatalf("json=%v call %d: %s", jsonMode, i, b)
			}
		}
		srv.Close()
		if n := dials.Load(); n != 1 {
			t.Errorf("json=%v: 5 calls one after another opened %d upstream connections, want 1", jsonMode, n)
		}
	}
}

// TestSilentCallStillGetsItsHeaders: the headers of an event-stream
// answer go out with its first event, in one write; a call whose upstream
// sends no event for a while still gets them, with a comment, so that a
// client with a timeout on headers does not give up on a long call.
func TestSilentCallStillGetsItsHeaders(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush() // headers, then silence
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n")
	}))
	t.Cleanup(up.Close)
	c := &rawClient{t: t, url: serveSidecar(t, &httpx.Sidecar{Upstream: up.URL})}
	resp := c.post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow"}}`) // returns with the headers
	defer resp.Body.Close()
	head := make([]byte, 3)
	if _, err := io.ReadFull(resp.Body, head); err != nil || string(head) != ":\n\n" {
		t.Fatalf("first bytes %q (%v), want the comment", head, err)
	}
	close(release)
	rest, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(rest), `"result"`) {
		t.Errorf("then %q, want the answer", rest)
	}
}

// idleServe is how long the tests' sidecars keep an idle connection: far
// longer than testClient keeps one (30 ms), so that a connection the
// client reuses is never one the server is closing. (At 100 ms, a test
// goroutine that a loaded machine left waiting between reading an answer
// and its next POST could send on a connection the server had just
// closed: "connection reset by peer" in TestChildSessionSlots.)
const idleServe = 5 * time.Second

// TestBatchAnsweredWithJSON: a 2025-03-26 client's batch, answered by its
// server with one JSON batch, reaches the client as one batch: the
// server's answers as they came, or after the proxy's own answers (here
// to an element that is not a message), never the server's batch nested
// in another.
func TestBatchAnsweredWithJSON(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	received := make(chan string, 2)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		received <- string(body)
		var batch []struct{ ID json.RawMessage }
		json.Unmarshal(body, &batch)
		var answers []string
		for _, m := range batch {
			answers = append(answers, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{}}`)
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, "["+strings.Join(answers, ",")+"]")
	}))
	defer up.Close()
	url := startSidecar(t, up.URL, proxy.TrackerOptions{})
	for _, tt := range []struct{ name, batch, sent, want string }{
		{"the server's answers alone",
			`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]`,
			`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]`,
			`[{"jsonrpc":"2.0","id":1,"result":{}},{"jsonrpc":"2.0","id":2,"result":{}}]`},
		{"the proxy's answer first",
			`[{"jsonrpc":"2.0","id":3,"method":"ping"},5]`,
			`[{"jsonrpc":"2.0","id":3,"method":"ping"}]`,
			`[{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request: invalid JSON-RPC message: message is not a JSON object","data":{"proxy":"mcp-cancel-proxy"}}},{"jsonrpc":"2.0","id":3,"result":{}}]`},
	} {
		req := (&rawClient{t: t, url: url, session: "s1"}).request(tt.batch)
		req.Header.Set("MCP-Protocol-Version", "2025-03-26") // batches' revision
		resp, err := testClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if sent := <-received; sent != tt.sent {
			t.Errorf("%s: the server received %s\nwant %s", tt.name, sent, tt.sent)
		}
		if string(got) != tt.want {
			t.Errorf("%s: the client got %d %s\nwant %s", tt.name, resp.StatusCode, got, tt.want)
		}
	}
}

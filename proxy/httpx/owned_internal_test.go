package httpx

import (
	"bufio"
	"bytes"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/policy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// serveOn serves h on a loopback port until the test ends, and returns
// its MCP URL.
func serveOn(t *testing.T, h fasthttp.RequestHandler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// Its idle connections are closed by Shutdown, not on a timer: a server
	// that closes a connection idle for 100 ms races the proxy's next
	// request on it, which may then have been read (and is answered, not
	// sent again), and a loaded machine loses that race.
	srv := &fasthttp.Server{Handler: h, CloseOnShutdown: true}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String() + "/mcp"
}

// TestShutdownWithAHungUpstream: a shutdown tells the upstream of every
// request in flight, but an upstream that never answers that cancel holds
// the shutdown up no longer than ownedWait, and the log says what was
// left; the client has the proxy's -32000 all the same.
func TestShutdownWithAHungUpstream(t *testing.T) { // not parallel: ownedWait is every sidecar's
	defer func(d time.Duration) { ownedWait = d }(ownedWait)
	ownedWait = 100 * time.Millisecond
	release, cancelled := make(chan struct{}), make(chan struct{}, 1)
	up := serveOn(t, func(ctx *fasthttp.RequestCtx) {
		body := ctx.PostBody()
		switch {
		case bytes.Contains(body, []byte(`"initialize"`)):
			initializeAnswer(ctx)
		case bytes.Contains(body, []byte(`notifications/cancelled`)):
			cancelled <- struct{}{}
			<-release // hung: the cancel is never answered
			ctx.SetStatusCode(fasthttp.StatusAccepted)
		default: // the call: an event stream that stays open
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) { w.WriteString(": open\n\n"); w.Flush(); <-release })
		}
	})
	free := sync.OnceFunc(func() { close(release) })
	t.Cleanup(free) // before the upstream's Shutdown, which waits for its handlers
	core, logs := observer.New(zap.WarnLevel)
	sc := &Sidecar{Upstream: up, UpstreamTransport: TransportStreamable, Logger: zap.New(core)}
	post := initializedOn(t, sc)
	call := post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow"}}`)
	defer fasthttp.ReleaseResponse(call)

	done := make(chan struct{})
	go func() { defer close(done); sc.Cleanup("the proxy is shutting down") }()
	<-cancelled
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Cleanup still waits for a cancel the upstream never answers")
	}
	got := readBody(call, 1<<20)
	if !bytes.Contains(got, []byte(`"id":1`)) || !bytes.Contains(got, []byte(`-32000`)) {
		t.Errorf("the call's stream: %q, want the proxy's -32000", got)
	}
	if logs.FilterMessageSnippet("shutting down with cancels not yet answered").Len() != 1 {
		t.Errorf("no warning of the unanswered cancel: %v", logs.All())
	}
	free()
	if ok, left := sc.notifying.Wait(10 * time.Second); !ok {
		t.Errorf("%d notifications still running after the upstream answered", left)
	}
}

// TestShutdownCutsLateAnswersReadForNobody: a call whose client cancelled
// it, kept upstream for a re-issue to join (reissue: join), has its
// upstream stream read on by a pump after the client's stream ended; at
// the sidecar's end nobody waits for that answer any more, and Cleanup
// cuts the stream in place of waiting ownedWait for an upstream that never
// ends it. Before, the pump read on past Cleanup, and logged into a test
// already over (a data race under -cpu 4).
func TestShutdownCutsLateAnswersReadForNobody(t *testing.T) { // not parallel: ownedWait is every sidecar's
	defer func(d time.Duration) { ownedWait = d }(ownedWait)
	ownedWait = time.Minute
	release, called := make(chan struct{}), make(chan struct{}, 1)
	up := serveOn(t, func(ctx *fasthttp.RequestCtx) {
		body := ctx.PostBody()
		switch {
		case bytes.Contains(body, []byte(`"initialize"`)):
			initializeAnswer(ctx)
		case bytes.Contains(body, []byte(`"tools/call"`)): // an event stream that stays open
			called <- struct{}{}
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) { w.WriteString(": open\n\n"); w.Flush(); <-release })
		default:
			ctx.SetStatusCode(fasthttp.StatusAccepted)
		}
	})
	t.Cleanup(sync.OnceFunc(func() { close(release) })) // before the upstream's Shutdown, which waits for its handlers
	p := policy.Defaults()
	p.Rules = []policy.Rule{{Tool: "slow", Reissue: "join"}}
	e, err := policy.New(policy.Options{Policy: p, Audit: policy.Audit{Path: "off"}, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	sc := &Sidecar{Upstream: up, UpstreamTransport: TransportStreamable, Logger: zap.NewNop(), Governor: e.Governor, LateWatch: time.Hour}
	post := initializedOn(t, sc)
	call := post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow"}}`)
	defer fasthttp.ReleaseResponse(call)
	<-called
	fasthttp.ReleaseResponse(post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`))
	readBody(call, 1<<20) // the client's stream ends; the upstream's is read on, for a re-issue

	done := make(chan struct{})
	go func() { defer close(done); sc.Cleanup("the proxy is shutting down") }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Cleanup waits for a late answer that nobody waits for")
	}
	if !sc.bg.Idle() {
		t.Error("goroutines of the sidecar's still run after Cleanup")
	}
}

// initializedOn serves sc until the test ends, initializes a session of
// id s-1 through it (the upstream's own), and returns what POSTs a
// message in that session, its response's body streamed.
func initializedOn(t *testing.T, sc *Sidecar) func(body string) *fasthttp.Response {
	h, err := sc.Handler()
	if err != nil {
		t.Fatal(err)
	}
	front := serveOn(t, h)
	client := &fasthttp.Client{StreamResponseBody: true}
	post := func(body string) *fasthttp.Response {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		req.SetRequestURI(front)
		req.Header.SetMethod(fasthttp.MethodPost)
		req.Header.SetContentType("application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set(upstream.SessionHeader, "s-1")
		req.SetBodyString(body)
		if err := client.Do(req, resp); err != nil {
			t.Fatal(err)
		}
		return resp
	}
	fasthttp.ReleaseResponse(post(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`))
	return post
}

// initializeAnswer answers an initialize as a 2025-06-18 upstream that
// opens the session s-1.
func initializeAnswer(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set(upstream.SessionHeader, "s-1")
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"u","version":"1"}}}`)
}

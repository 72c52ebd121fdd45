package httpx_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/check"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// TestCancelNeverOvertakesItsRequest: a Streamable HTTP upstream reached
// as a client (the bridge's, an old client's) gets a request's cancel only
// after the request itself, however long the request's connection takes to
// open: the cancel waits for the request to be written, not for a timer.
// In a synctest bubble, so that "a long time" is a fake second and the
// check that the cancel did not go is exact.
func TestCancelNeverOvertakesItsRequest(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	handler := func(ctx *fasthttp.RequestCtx) {
		mu.Lock()
		got = append(got, string(ctx.PostBody()))
		mu.Unlock()
		if bytes.Contains(ctx.PostBody(), []byte(`"id":1`)) {
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"jsonrpc":"2.0","id":1,"result":{}}`)
			return
		}
		ctx.SetStatusCode(fasthttp.StatusAccepted)
	}
	var release chan struct{} // made in the bubble, as whatever its goroutines wait on
	var dials atomic.Int32
	slowFirst := func(open func() (net.Conn, error)) (net.Conn, error) {
		if dials.Add(1) == 1 {
			<-release // the request's connection is slow to open
		}
		return open()
	}
	inBubble(t, handler, slowFirst, func(t *testing.T, back check.Lines) {
		release = make(chan struct{})
		out := back.Out
		out.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow"}}` + "\n"))
		go out.Write([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}` + "\n"))

		time.Sleep(time.Second) // fake time: every timer the backend set has fired
		synctest.Wait()
		mu.Lock()
		early := append([]string(nil), got...)
		mu.Unlock()
		if n := dials.Load(); n != 1 || len(early) != 0 {
			t.Errorf("before the request was written: %d connections opened, the upstream got %q; want 1 and nothing", n, early)
		}

		close(release)
		synctest.Wait()
		mu.Lock()
		order := strings.Join(got, "\n")
		mu.Unlock()
		if i, j := strings.Index(order, `"method":"tools/call"`), strings.Index(order, `notifications/cancelled`); i < 0 || j < i {
			t.Errorf("the upstream got:\n%s\nwant the request, then its cancel", order)
		}
	})
}

// inBubble runs test in a synctest bubble with a Streamable HTTP backend
// (the bridge's, an old client's) of a fasthttp server with handler, on
// an in-memory listener; dial, if not nil, opens the backend's
// connections with the listener's. The backend, its server and fasthttp's
// cleaners end before the bubble does.
func inBubble(t *testing.T, handler fasthttp.RequestHandler, dial func(open func() (net.Conn, error)) (net.Conn, error), test func(t *testing.T, back check.Lines)) {
	var h fasthttp.ResponseHeader
	h.AppendBytes(nil) // fasthttp's Date refresher starts now, outside the bubble: it never ends
	synctest.Test(t, func(t *testing.T) {
		ln := fasthttputil.NewInmemoryListener()
		srv := &fasthttp.Server{Handler: handler}
		go srv.Serve(ln)
		if dial == nil {
			dial = func(open func() (net.Conn, error)) (net.Conn, error) { return open() }
		}
		client := &fasthttp.Client{StreamResponseBody: true, Dial: func(string) (net.Conn, error) { return dial(ln.Dial) }}
		u, _ := url.Parse("http://upstream.test/mcp")
		conn, err := (&upstream.StreamableUpstream{Endpoint: upstream.Endpoint{URL: u, Client: client}}).Dial(zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		back := check.OverConn(conn)
		go io.Copy(io.Discard, back.In) // what the upstream answers; ends with the connection
		test(t, back)
		back.Stop()
		ln.Close()
		srv.Shutdown()
		client.CloseIdleConnections()
		time.Sleep(time.Minute) // fake time: fasthttp's cleaners see nothing left to do, and end
	})
}

// TestOnlyACancelWaitsForItsRequest: where the proxy is a Streamable HTTP
// client (the bridge, an old client's session), a call the server is
// silent about until it is done (the go-sdk's and mcp-go's servers send no
// headers until then) holds up no other POST; its cancel alone waits, for
// the request's headers or upstream.TakenInWait, while a cancel of a
// request whose headers came (the TypeScript and Python SDKs' servers
// send them at once) goes at once. In a synctest bubble: time passes only
// where the test sleeps, and "not yet sent" is exact.
func TestOnlyACancelWaitsForItsRequest(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	var release chan struct{} // made in the bubble, as whatever its goroutines wait on
	handler := func(ctx *fasthttp.RequestCtx) {
		body := string(ctx.PostBody())
		mu.Lock()
		got = append(got, body)
		mu.Unlock()
		switch {
		case strings.Contains(body, `"id":1`): // silent until done: no headers
			<-release
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"jsonrpc":"2.0","id":1,"result":{}}`)
		case strings.Contains(body, `"id":3`): // headers at once, then silent
			ctx.SetContentType("text/event-stream")
			ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
				w.WriteString(": taken in\n\n")
				w.Flush()
				<-release
				w.WriteString("data: {\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}\n\n")
			})
		case strings.Contains(body, `"id":`):
			ctx.SetContentType("application/json")
			ctx.SetBodyString(`{"jsonrpc":"2.0","id":2,"result":{}}`)
		default:
			ctx.SetStatusCode(fasthttp.StatusAccepted)
		}
	}
	inBubble(t, handler, nil, func(t *testing.T, back check.Lines) {
		release = make(chan struct{})
		defer close(release)
		// The session's writer, apart from the test's goroutine: a Write
		// that waited for a timer would not make time pass for the test.
		lines := make(chan string)
		defer close(lines)
		go func() {
			for l := range lines {
				back.Out.Write([]byte(l + "\n"))
			}
		}()
		received := func(what string) bool {
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			return slices.ContainsFunc(got, func(b string) bool { return strings.Contains(b, what) })
		}
		cancelOf := func(id int) string {
			return `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + strconv.Itoa(id) + `}}`
		}

		lines <- `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"silent"}}`
		lines <- `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
		if !received(`"id":2`) {
			t.Error("a request after a silent call was held back: no time passed, and the upstream has not got it")
		}
		lines <- cancelOf(1)
		if received(cancelOf(1)) {
			t.Error("the cancel of a silent call went before its request's headers, with no time passed")
		}
		time.Sleep(upstream.TakenInWait) // fake time
		if !received(cancelOf(1)) {
			t.Errorf("the cancel of a silent call was not sent %v after its request was written", upstream.TakenInWait)
		}

		lines <- `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"taken-in"}}`
		if !received(`"id":3`) {
			t.Fatal("the upstream never got request 3")
		}
		lines <- cancelOf(3)
		if !received(cancelOf(3)) {
			t.Error("the cancel of a request whose headers came waited: no time passed, and the upstream has not got it")
		}
	})
}

// TestRelayedCancelWaitsForItsRequest: the sidecar in front of a
// Streamable HTTP upstream holds a client's cancel as the bridge does
// (TestOnlyACancelWaitsForItsRequest): while its request's POST has no
// headers, the cancel goes upstream only upstream.TakenInWait after the
// request was written, on the sidecar's clock; the client has its 202 at
// once. Before, it was sent at once, and a server could read it before
// the request it names.
func TestRelayedCancelWaitsForItsRequest(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	release := make(chan struct{})
	bodies := make(chan string, 8)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		bodies <- string(body)
		switch {
		case strings.Contains(string(body), `"initialize"`):
			w.Header().Set("Mcp-Session-Id", "s1")
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{},"serverInfo":{"name":"silent","version":"1"}}}`)
		case strings.Contains(string(body), `"tools/call"`): // silent until done: no headers
			select {
			case <-release:
			case <-r.Context().Done():
			}
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	defer up.Close()
	defer close(release) // before the upstream closes: its call ends
	clk := clock.NewFake(time.Now())
	c := &rawClient{t: t, url: serveSidecar(t, &httpx.Sidecar{Upstream: up.URL, Clock: clk})}
	c.initialize()
	<-bodies // initialize
	<-bodies // initialized
	go func() {
		if resp, err := testClient.Do(c.request(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"silent"}}`)); err == nil {
			resp.Body.Close()
		}
	}()
	if b := <-bodies; !strings.Contains(b, `"tools/call"`) {
		t.Fatalf("the upstream got %s, want the call", b)
	}
	before := clk.Pending()
	resp := c.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("the cancel was answered %d, want 202 at once", resp.StatusCode)
	}
	// Two timers: the cancelled stream's grace, and the cancel's wait.
	for deadline := time.After(10 * time.Second); clk.Pending() < before+2; {
		select {
		case <-clk.Armed():
		case <-deadline:
			t.Fatalf("%d timers set after the cancel, want 2: the cancel did not wait for its request", clk.Pending()-before)
		}
	}
	select {
	case b := <-bodies:
		t.Fatalf("the upstream got %s before the cancel's wait ended", b)
	default:
	}
	clk.Advance(upstream.TakenInWait)
	if b := <-bodies; !strings.Contains(b, "notifications/cancelled") {
		t.Errorf("the upstream got %s, want the cancel", b)
	}
}

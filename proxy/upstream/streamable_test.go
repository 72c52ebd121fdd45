package upstream_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/check"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// headless is a stateless Streamable HTTP server (no session id) that
// holds the headers of its answer to a tools/call until release closes,
// then opens an event stream, reports progress once and waits for the
// client to leave it.
type headless struct {
	called   chan struct{} // closed when the call has come
	release  chan struct{} // closed by the test: the call's headers go
	left     chan struct{} // closed when the client left the call's stream
	finished chan struct{} // closed when the call's handler has returned
}

func (h *headless) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&m) != nil {
		w.WriteHeader(http.StatusMethodNotAllowed) // no GET stream
		return
	}
	switch m.Method {
	case "initialize":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"headless","version":"1"}}}`)
	case "ping":
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(m.ID)+`,"result":{}}`)
	case "tools/call":
		defer close(h.finished)
		close(h.called)
		<-h.release
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p\",\"progress\":1}}\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
			close(h.left)
		case <-time.After(30 * time.Second): // bounds the test: it fails
		}
	default: // server/discover, notifications
		w.WriteHeader(http.StatusAccepted)
	}
}

// TestStatelessCancel: without a session a POSTed cancel cannot reach its
// request, so the backend closes the request's stream, and owes the
// session nothing more of it: not its progress, nor an error for the
// stream it closed. A cancel that comes while the request's answer has no
// headers yet closes it as soon as they come (before, it found no stream
// to close, and was lost; and a stream closed while read was answered
// with the proxy's -32000).
func TestStatelessCancel(t *testing.T) {
	for _, beforeHeaders := range []bool{true, false} {
		name := map[bool]string{true: "before-headers", false: "while-streaming"}[beforeHeaders]
		t.Run(name, func(t *testing.T) { statelessCancel(t, beforeHeaders) })
	}
}

func statelessCancel(t *testing.T, beforeHeaders bool) {
	h := &headless{called: make(chan struct{}), release: make(chan struct{}), left: make(chan struct{}), finished: make(chan struct{})}
	srv := httptest.NewServer(h)
	defer srv.Close()
	u, _ := url.Parse(srv.URL + "/mcp")
	up, err := (&upstream.StreamableUpstream{Endpoint: upstream.Endpoint{URL: u, Client: upstream.NewClient(0, 0)}}).Dial(zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	conn := check.OverConn(up)
	defer conn.Stop()
	lines := bufio.NewReader(conn.In)
	next := func(what string) string {
		t.Helper()
		line, err := lines.ReadString('\n')
		if err != nil {
			t.Fatalf("no %s: %v", what, err)
		}
		return line
	}
	io.WriteString(conn.Out, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
	next("answer to initialize")
	io.WriteString(conn.Out, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow","_meta":{"progressToken":"p"}}}`+"\n")
	<-h.called
	if !beforeHeaders {
		close(h.release)
		next("progress") // the stream is open and read
	}
	io.WriteString(conn.Out, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`+"\n")
	if beforeHeaders {
		close(h.release)
	}
	<-h.finished // at once when the client leaves; 30 s later if it never does
	select {
	case <-h.left:
	default:
		t.Fatal("the backend did not close the stream of the request it was told to cancel")
	}
	io.WriteString(conn.Out, `{"jsonrpc":"2.0","id":3,"method":"ping"}`+"\n")
	if got := next("answer to ping"); !strings.Contains(got, `"id":3`) {
		t.Errorf("after the cancel the session got %s, want nothing before the ping's answer", got)
	}
}

// rpcOf decodes the id and method of a request's JSON-RPC message; ok is
// false for a request that is no POST of one.
func rpcOf(r *http.Request) (id json.RawMessage, method string, ok bool) {
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&m) != nil {
		return nil, "", false
	}
	return m.ID, m.Method, true
}

// initialized answers an initialize with id as a 2025-11-25 server.
func initialized(w http.ResponseWriter, id json.RawMessage) {
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(id)+`,"result":{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"s","version":"1"}}}`)
}

// dialScripted dials the scripted server h as the bridge does (its 2025
// requests kept as they are), sends initialize, and returns the backend
// (stopped when the test ends), where to write the session's lines, and
// the lines it gets back.
func dialScripted(t *testing.T, h http.HandlerFunc) (check.Lines, io.Writer, *bufio.Reader) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL + "/mcp")
	up, err := (&upstream.StreamableUpstream{Endpoint: upstream.Endpoint{URL: u, Client: upstream.NewClient(0, 0)}, KeepRevision: true}).Dial(zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	conn := check.OverConn(up)
	t.Cleanup(conn.Stop)
	lines := bufio.NewReader(conn.In)
	io.WriteString(conn.Out, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
	if _, err := lines.ReadString('\n'); err != nil {
		t.Fatalf("no answer to initialize: %v", err)
	}
	return conn, conn.Out, lines
}

// asker returns a function that writes a message to the session's out and
// returns the next line it gets back, trimmed.
func asker(t *testing.T, out io.Writer, lines *bufio.Reader) func(msg string) string {
	return func(msg string) string {
		t.Helper()
		io.WriteString(out, msg+"\n")
		line, err := lines.ReadString('\n')
		if err != nil {
			t.Fatalf("no answer to %s: %v", msg, err)
		}
		return strings.TrimSpace(line)
	}
}

// TestServerErrorsReachTheClientAsWritten: a stateless server that answers
// an unknown method or bad params with a JSON-RPC error under an HTTP
// error status has its error reach the client as it wrote it (code,
// message, data), under the request's id; the bridge answered -32603
// "the upstream refused the message" for them. A refusal that is no
// JSON-RPC error stays the proxy's own -32603.
func TestServerErrorsReachTheClientAsWritten(t *testing.T) {
	_, out, lines := dialScripted(t, func(w http.ResponseWriter, r *http.Request) {
		id, method, _ := rpcOf(r)
		switch method {
		case "initialize":
			initialized(w, id)
		case "nope/unknown":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, "{\n  \"jsonrpc\": \"2.0\", \"id\": null,\n  \"error\": {\"code\": -32601, \"message\": \"Method not found\", \"data\": {\"method\": \"nope/unknown\"}}\n}")
		case "tools/call":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(id)+`,"error":{"code":-32602,"message":"Invalid params: name"}}`)
		case "ping":
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, "upstream of the upstream down")
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	})
	ask := asker(t, out, lines)
	for msg, want := range map[string]string{
		`{"jsonrpc":"2.0","id":2,"method":"nope/unknown"}`:                     `{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"Method not found","data":{"method":"nope/unknown"}}}`,
		`{"jsonrpc":"2.0","id":"c","method":"tools/call","params":{"name":1}}`: `{"jsonrpc":"2.0","id":"c","error":{"code":-32602,"message":"Invalid params: name"}}`,
	} {
		if got := ask(msg); got != want {
			t.Errorf("answer to %s:\n got %s\nwant %s", msg, got, want)
		}
	}
	if got := ask(`{"jsonrpc":"2.0","id":3,"method":"ping"}`); !strings.Contains(got, `"code":-32603`) || !strings.Contains(got, "HTTP 502") {
		t.Errorf("a refusal that is no JSON-RPC error: %s, want the proxy's -32603 naming the status", got)
	}
}

// sessionCalls is a server of session s1 that answers initialize, takes
// every other request or notification (a cancel, the DELETE) with 202,
// and serves each tools/call with call.
func sessionCalls(call http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, method, ok := rpcOf(r)
		if !ok {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Mcp-Session-Id", "s1")
		switch method {
		case "initialize":
			initialized(w, id)
		case "tools/call":
			call(w, r)
		default: // notifications, cancels, DELETE
			w.WriteHeader(http.StatusAccepted)
		}
	}
}

// TestStopOwesNoAnswer: a call cancelled, its stream still open (the
// server goes on with progress, as server-everything does), then the
// client leaves: the backend's stop closes the stream, and gives the
// session no -32000 for it. The bridge audited that error as the server's
// answer after the cancel ("answered after the cancel (suppressed)", with
// a WARN), an answer that never came.
func TestStopOwesNoAnswer(t *testing.T) {
	called := make(chan struct{})
	b, out, lines := dialScripted(t, sessionCalls(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "id: 1\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"p\",\"progress\":1}}\n\n")
		w.(http.Flusher).Flush()
		close(called)
		<-r.Context().Done() // the call runs on until the client leaves
	}))
	io.WriteString(out, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow","_meta":{"progressToken":"p"}}}`+"\n")
	<-called
	lines.ReadString('\n') // the progress
	io.WriteString(out, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`+"\n")
	b.Stop()
	rest, _ := io.ReadAll(lines) // to the end the stop makes
	if strings.Contains(string(rest), `"id":2`) {
		t.Errorf("after its stop the backend gave the session %s for the call it had ended itself", rest)
	}
}

// TestStopEndsCallsWithoutHeaders: the client leaves while a call's
// answer has no headers yet (a server that sends nothing until it
// answers, here one that never does, and ignores the cancel): the
// backend's stop closes the call's connection, since nobody will read its
// answer, and exits. Before, the stop waited for that answer for ever,
// and the bridge outlived its client (TestE2EProgressTheClientNeverAskedFor
// in CI, when the deadline's cancel was in flight as the client left).
func TestStopEndsCallsWithoutHeaders(t *testing.T) {
	called, left, over := make(chan struct{}), make(chan struct{}), make(chan struct{})
	b, out, _ := dialScripted(t, sessionCalls(func(w http.ResponseWriter, r *http.Request) {
		close(called)
		select { // no headers, ever: until the client leaves
		case <-r.Context().Done():
			close(left)
		case <-over: // the test failed: its server may close
		}
	}))
	io.WriteString(out, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"block"}}`+"\n")
	t.Cleanup(func() { close(over) }) // before the server's close, which waits for its handlers
	<-called
	stopped := make(chan struct{})
	go func() { b.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("the backend did not exit: it waits for an answer nobody will read")
	}
	<-left // the server saw the connection go
}

// heldGET is a connection whose writes of a GET request wait until
// release closes: a GET stream slow to leave the proxy.
type heldGET struct {
	net.Conn
	release <-chan struct{}
}

func (c heldGET) Write(p []byte) (int, error) {
	if bytes.HasPrefix(p, []byte("GET ")) {
		<-c.release
	}
	return c.Conn.Write(p)
}

// TestInitializedWaitsForTheGETStream: the line that follows the answer
// to initialize goes once the session's GET stream has its headers (or
// StreamWait has passed), so that the server has the stream before it
// learns that the client is initialized. Before, the GET raced the
// client's next lines: the conformance suite's sse-retry server, which
// counts any GET after a call's stream as its resumption, failed the
// bridge when its GET came after the call. Here the GET is held in its
// write until the POST of notifications/initialized has reached the
// server (as before) or the backend has armed its wait (as now); the
// server must see the GET first.
func TestInitializedWaitsForTheGETStream(t *testing.T) {
	var mu sync.Mutex
	var order []string
	initializedCame := make(chan struct{})
	bothCame := make(chan struct{}, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			mu.Lock()
			order = append(order, "GET")
			mu.Unlock()
			bothCame <- struct{}{}
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		id, method, _ := rpcOf(r)
		switch method {
		case "initialize":
			w.Header().Set(upstream.SessionHeader, "s1")
			initialized(w, id)
		case "notifications/initialized":
			mu.Lock()
			order = append(order, method)
			mu.Unlock()
			close(initializedCame)
			bothCame <- struct{}{}
			w.WriteHeader(http.StatusAccepted)
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL + "/mcp")
	release := make(chan struct{})
	client := upstream.NewClient(0, 0)
	client.Dial = func(addr string) (net.Conn, error) {
		c, err := fasthttp.Dial(addr)
		if err != nil {
			return nil, err
		}
		return heldGET{Conn: c, release: release}, nil
	}
	clk := clock.NewFake(time.Unix(0, 0))
	armed := clk.Armed()
	up, err := (&upstream.StreamableUpstream{Endpoint: upstream.Endpoint{URL: u, Client: client}, Clock: clk}).Dial(zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	conn := check.OverConn(up)
	defer conn.Stop()
	lines := bufio.NewReader(conn.In)
	io.WriteString(conn.Out, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
	if _, err := lines.ReadString('\n'); err != nil {
		t.Fatalf("no answer to initialize: %v", err)
	}
	go io.WriteString(conn.Out, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
	select {
	case <-initializedCame: // it did not wait
	case <-armed: // it waits for the GET
	}
	close(release)
	<-bothCame
	<-bothCame
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(order, []string{"GET", "notifications/initialized"}) {
		t.Errorf("the server saw %v, want the GET stream before notifications/initialized", order)
	}
}

// TestJSONAnswerComesParsed: a request's JSON answer, parsed to check that
// it answers the request (Spoiled), comes with its frame (Parsed), so that
// the session that reads it does not parse it again; the whitespace a
// server's encoder ends a body with is not the message's. A message the
// Stream did not parse (the proxy's own error) comes without one.
func TestJSONAnswerComesParsed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, method, _ := rpcOf(r)
		w.Header().Set("Content-Type", "application/json")
		if method == "tools/call" {
			io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(id)+`,"result":{"content":[]}}`+"\n")
			return
		}
		io.WriteString(w, `{"jsonrpc":"2.0","id":99,"result":{}}`) // another id's
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL + "/mcp")
	conn := (&upstream.StreamableUpstream{Endpoint: upstream.Endpoint{URL: u, Client: upstream.NewClient(0, 0)}, KeepRevision: true}).Open(zaptest.NewLogger(t))
	t.Cleanup(func() { conn.Close() })
	for _, c := range []struct {
		frame, want string
		parsed      bool
	}{
		{`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}`, `{"jsonrpc":"2.0","id":7,"result":{"content":[]}}`, true},
		{`{"jsonrpc":"2.0","id":8,"method":"ping"}`, `upstream_spoiled`, false},
	} {
		st, err := conn.Send(context.Background(), []byte(c.frame), []*proxy.Call{new(proxy.Call)}, upstream.Along{})
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.Next()
		if err != nil || !strings.Contains(string(m), c.want) {
			t.Fatalf("%s: answered %s, %v; want %s", c.frame, m, err, c.want)
		}
		f := st.(upstream.Parsed).Frame()
		switch {
		case !c.parsed && f != nil:
			t.Errorf("%s: the proxy's own answer came parsed", c.frame)
		case c.parsed && f == nil:
			t.Errorf("%s: the answer came without its frame", c.frame)
		case c.parsed && (f.Batch || string(f.Msgs[0].Raw) != c.want || f.Msgs[0].ID != framing.IntID(7)):
			t.Errorf("%s: its frame holds %s (id %v), want %s", c.frame, f.Msgs[0].Raw, f.Msgs[0].ID, c.want)
		}
	}
}

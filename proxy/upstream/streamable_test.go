package upstream_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

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
	b, err := (&upstream.StreamableUpstream{Endpoint: upstream.Endpoint{URL: u, Client: upstream.NewClient(0, 0)}}).Dial(zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { b.Stop(); <-b.Exited() }()
	conn := b.Conn()
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

package httpx_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// TestSSEUpstreamWantsAuthorization: an HTTP+SSE upstream that answers
// 401 gets the same words as a Streamable HTTP one: a request POSTed to
// its endpoint is answered with the proxy's error of kind unauthorized,
// quoting WWW-Authenticate; an event stream refused with 401 says what the
// server wants and how to give it.
func TestSSEUpstreamWantsAuthorization(t *testing.T) {
	watchdog(t, 30*time.Second)
	challenge := `Bearer resource_metadata="https://mcp.example/.well-known/oauth-protected-resource"`
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sse", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: endpoint\ndata: /message\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	mux.HandleFunc("POST /message", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", challenge)
		w.WriteHeader(http.StatusUnauthorized)
	})
	mux.HandleFunc("GET /locked", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", challenge)
		w.WriteHeader(http.StatusUnauthorized)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	up, err := upstream.NewSSEUpstream(srv.URL+"/sse", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	back, err := up.Dial(zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer back.Stop()
	conn := back.Conn()
	lines := make(chan []byte, 1)
	go func() { // the answer is a line the backend writes while the POST is handled
		line, _ := framing.NewReader(conn.In, 0).Read(nil)
		lines <- line
	}()
	io.WriteString(conn.Out, `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`+"\n")
	line := <-lines
	if got := string(line); !strings.Contains(got, `"id":7`) || !strings.Contains(got, `"kind":"unauthorized"`) || !strings.Contains(got, "resource_metadata") {
		t.Errorf("a request the endpoint refused with 401 got %s, want the proxy's unauthorized error quoting the challenge", got)
	}

	locked, err := upstream.NewSSEUpstream(srv.URL+"/locked", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locked.Dial(zaptest.NewLogger(t)); err == nil || !strings.Contains(err.Error(), "wants authorization") || !strings.Contains(err.Error(), "--header") {
		t.Errorf("an event stream refused with 401: %v, want what the server wants and how to give it", err)
	}
}

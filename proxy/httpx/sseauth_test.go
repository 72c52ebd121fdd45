package httpx_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/check"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream/upstreamtest"
)

// TestSSEUpstreamWantsAuthorization: an HTTP+SSE upstream that answers
// 401 gets the same words as a Streamable HTTP one: a request POSTed to
// its endpoint is answered with the proxy's error of kind unauthorized,
// quoting WWW-Authenticate; an event stream refused with 401 says what the
// server wants and how to give it.
func TestSSEUpstreamWantsAuthorization(t *testing.T) {
	t.Parallel()
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
	up2, err := up.Dial(zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	conn := check.OverConn(up2)
	defer conn.Stop()
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

// gatedAuth is a sign-in under way once gate is called: Token waits
// until release closes.
type gatedAuth struct {
	mu      sync.Mutex
	gated   bool
	release chan struct{}
}

func (a *gatedAuth) gate() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.gated = true
}

func (a *gatedAuth) Token(waiting func()) (string, error) {
	a.mu.Lock()
	gated := a.gated
	a.mu.Unlock()
	if gated {
		waiting()
		<-a.release
	}
	return "tok", nil
}

func (a *gatedAuth) Challenged(int, []string, string) (bool, error) { return false, nil }

// TestSSEUpstreamWithdrawsWhileSigningIn: to an HTTP+SSE upstream, a
// request that waits for a sign-in is withdrawn by its cancel, which
// does not wait behind it: once the sign-in is done, the server gets
// neither, and the request written after them is sent and answered.
func TestSSEUpstreamWithdrawsWhileSigningIn(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	events := make(chan []byte, 4)
	var mu sync.Mutex
	var got []string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /sse", func(w http.ResponseWriter, r *http.Request) {
		upstreamtest.ServeEvents(w, r, "/message", events, nil)
	})
	mux.HandleFunc("POST /message", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, string(body))
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		if strings.Contains(string(body), `"id":8`) {
			events <- []byte(`{"jsonrpc":"2.0","id":8,"result":{}}`)
		}
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	up, err := upstream.NewSSEUpstream(srv.URL+"/sse", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	a := &gatedAuth{release: make(chan struct{})}
	upstream.AddAuth(up.Client, a)
	up2, err := up.Dial(zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	conn := check.OverConn(up2)
	a.gate() // a sign-in is under way from here
	io.WriteString(conn.Out, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"slow"}}`+"\n")
	io.WriteString(conn.Out, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`+"\n")
	io.WriteString(conn.Out, `{"jsonrpc":"2.0","id":8,"method":"tools/list"}`+"\n")
	close(a.release) // signed in
	line, err := framing.NewReader(conn.In, 0).Read(nil)
	if err != nil || !strings.Contains(string(line), `"id":8`) {
		t.Fatalf("the request after the withdrawn one: %s, %v", line, err)
	}
	conn.Stop() // every POST has ended
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || !strings.Contains(got[0], `"id":8`) {
		t.Errorf("the server got %q; want only the request after the withdrawn one", got)
	}
}

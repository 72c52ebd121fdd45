package httpx_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	feed "github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// sseUpstream serves the upstream's MCP server over the go-sdk's HTTP+SSE
// handler (protocol 2024-11-05) and a sidecar in front of it, and returns
// the upstream, its HTTP server and the sidecar's URL.
func sseUpstream(t *testing.T) (*sdkServer, *httptest.Server, string) {
	return sseUpstreamWith(t, nil, nil)
}

// sseUpstreamWrapped is sseUpstream with the server's handler wrapped, if
// wrap is not nil.
func sseUpstreamWrapped(t *testing.T, wrap func(http.Handler) http.Handler) (*sdkServer, *httptest.Server, string) {
	return sseUpstreamWith(t, wrap, nil)
}

// sseUpstreamWith is sseUpstreamWrapped whose sidecar is sc (its
// upstream, children and logger set here), if not nil.
func sseUpstreamWith(t *testing.T, wrap func(http.Handler) http.Handler, sc *httpx.Sidecar) (*sdkServer, *httptest.Server, string) {
	u, s := newUpstreamServer()
	var h http.Handler = mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return s }, nil)
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(u.release) }) // calls whose session broke end before the server
	u.url = srv.URL
	up, err := upstream.NewSSEUpstream(srv.URL, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	cs := &httpx.Children{Dial: up}
	if sc == nil {
		sc = &httpx.Sidecar{}
	}
	sc.Upstream, sc.Logger, sc.Children = srv.URL, zaptest.NewLogger(t), cs
	return u, srv, serveSidecar(t, sc)
}

// TestNoCancelGraceEndsTheStream: with NoCancelGrace (http.cancel_grace
// 0), a cancelled call's stream ends once the cancel is accepted, without
// waiting on the sidecar's clock (which never moves here), whether the
// relay carries it (a Streamable HTTP upstream) or a line session (an
// HTTP+SSE upstream); the upstream still gets the cancel. Before, a grace
// of 0 was taken for the default.
func TestNoCancelGraceEndsTheStream(t *testing.T) {
	t.Parallel()
	for _, sse := range []bool{false, true} {
		t.Run(map[bool]string{false: "streamable", true: "sse"}[sse], func(t *testing.T) {
			t.Parallel()
			watchdog(t, 30*time.Second)
			clk := clock.NewFake(time.Now())
			up, url := autoSidecar(t, sse, nil, zaptest.NewLogger(t), func(sc *httpx.Sidecar) {
				sc.CancelGrace, sc.Clock = httpx.NoCancelGrace, clk
			})
			c := &rawClient{t: t, url: url}
			c.initialize()
			resp := c.post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"wait_cancel","arguments":{"key":"n"},"_meta":{"progressToken":"n"}}}`)
			msgs := events(resp.Body)
			if m := <-msgs; m["method"] != "notifications/progress" {
				t.Fatalf("first message %v, want the call's progress", m)
			}
			c.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`).Body.Close()
			if key := <-up.sawCancel; key != "n" {
				t.Errorf("upstream cancelled %q, want n", key)
			}
			for m := range msgs { // ends with the stream, or the watchdog fails the test
				t.Errorf("after the cancel the client got %v", m)
			}
		})
	}
}

// TestSSEUpstreamCancel: a go-sdk client cancels a call through the sidecar
// to an HTTP+SSE server: the server's handler sees its context cancelled
// (the cancel was POSTed to its message endpoint), the client gets no late
// progress, and the session goes on.
func TestSSEUpstreamCancel(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up, _, url := sseUpstream(t)
	goSDKClientCancels(t, up, &mcp.StreamableClientTransport{Endpoint: url})
}

// TestSSEUpstreamServerCancelsSampling: cancelling a call whose server is
// asking the client for a sampling completion makes the server cancel that
// request of its own; the cancel comes down the upstream's one stream and
// reaches the client on the call's stream, which the client keeps reading
// (as the TypeScript SDK does), before that stream ends.
func TestSSEUpstreamServerCancelsSampling(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	// A grace long enough for a loaded machine, which the stream waits out
	// (the server's cancel comes on the upstream's one stream, and nothing
	// says it is the last): with the tests' 50 ms, the cancel came after
	// the stream's end once, in CI.
	_, _, url := sseUpstreamWith(t, nil, &httpx.Sidecar{CancelGrace: 3 * time.Second})
	nestedCancelReachesClient(t, &rawClient{t: t, url: url})
}

// TestSSEUpstreamRefusedPost: a request the message endpoint refuses is
// answered with an error naming the status; the session goes on.
func TestSSEUpstreamRefusedPost(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	_, _, url := sseUpstreamWrapped(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				body, _ := io.ReadAll(r.Body)
				if strings.Contains(string(body), `"refuse_me"`) {
					http.Error(w, "no such thing", http.StatusBadRequest)
					return
				}
				r.Body = io.NopCloser(strings.NewReader(string(body)))
			}
			h.ServeHTTP(w, r)
		})
	})
	client := mcp.NewClient(&mcp.Implementation{Name: "go-sdk", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	_, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "refuse_me"})
	if err == nil || !strings.Contains(err.Error(), "HTTP 400 no such thing") {
		t.Errorf("CallTool = %v, want the upstream's refusal", err)
	}
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Errorf("tools/list after the refusal: %v", err)
	}
}

// TestSSEUpstreamStreamDrops: the upstream's connections break in the
// middle of a call; the call is answered with an error at once.
func TestSSEUpstreamStreamDrops(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up, srv, url := sseUpstream(t)
	client := mcp.NewClient(&mcp.Implementation{Name: "go-sdk", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "wait_cancel", Arguments: map[string]any{"key": "d"}})
		errc <- err
	}()
	<-up.started
	srv.CloseClientConnections()
	// The drop may also cut the call's own POST, not yet answered 202:
	// then that answers it, at once as well.
	if err := <-errc; err == nil || !strings.Contains(err.Error(), "exited before answering") &&
		!strings.Contains(err.Error(), "connection failed after the request was sent") {
		t.Errorf("CallTool = %v, want the server-gone error", err)
	}
}

// TestSSEUpstreamThatIsNot: an upstream that does not serve an event stream,
// or names an endpoint elsewhere, is refused with a reason.
func TestSSEUpstreamThatIsNot(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, want string
		h          http.HandlerFunc
	}{
		{"not found", "answered its event stream's GET with 404", func(w http.ResponseWriter, _ *http.Request) {
			http.NotFound(w, nil)
		}},
		{"elsewhere", "is not on the stream's origin", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Write([]byte("event: endpoint\ndata: http://198.51.100.7/messages\n\n"))
		}},
		{"no endpoint", "ended before its endpoint event", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Write([]byte("data: {}\n\n"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.h)
			defer srv.Close()
			up, err := upstream.NewSSEUpstream(srv.URL, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			_, err = up.Dial(zaptest.NewLogger(t))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Dial = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestAutoDetectsTheTransport: with UpstreamTransport auto, the sidecar
// finds out at the first request whether its upstream speaks HTTP+SSE or
// Streamable HTTP, and a cancel works through either.
func TestAutoDetectsTheTransport(t *testing.T) {
	t.Parallel()
	for _, sse := range []bool{true, false} {
		name := map[bool]string{true: "HTTP+SSE", false: "Streamable HTTP"}[sse]
		transport := map[bool]string{true: upstream.TransportSSE, false: upstream.TransportStreamable}[sse]
		t.Run(name, func(t *testing.T) {
			watchdog(t, 30*time.Second)
			core, logs := observer.New(zapcore.InfoLevel)
			u, url := autoSidecar(t, sse, nil, zap.New(core))
			goSDKClientCancels(t, u, &mcp.StreamableClientTransport{Endpoint: url})
			found := logs.FilterField(feed.Mark(feed.UpstreamDetected)).All()
			if len(found) != 1 || found[0].ContextMap()["transport"] != transport {
				t.Errorf("detections: %v; want one, of %s", found, transport)
			}
		})
	}
}

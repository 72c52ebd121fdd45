package httpx_test

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/valyala/fasthttp"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// proxyGoroutines counts the goroutines the proxy's packages started, by
// the function that started each (fasthttp's and the tests' are not).
func proxyGoroutines() map[string]int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	by := map[string]int{}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		i := bytes.Index(g, []byte("\ncreated by "))
		if i < 0 {
			continue
		}
		creator, _, _ := strings.Cut(string(g[i+len("\ncreated by "):]), "\n")
		creator, _, _ = strings.Cut(creator, " in goroutine")
		if strings.Contains(creator, "/mcp-cancel-proxy/mcp-cancel-proxy/") && !strings.Contains(creator, "_test.") {
			by[creator]++
		}
	}
	return by
}

// perSession is how many goroutines of the proxy's each of n sessions
// added, between two counts; it logs them by their starter.
func perSession(t *testing.T, before, after map[string]int, n int) int {
	total := 0
	for k, c := range after {
		if d := c - before[k]; d != 0 {
			t.Logf("%+d: %s", d, k)
			total += d
		}
	}
	return total / n
}

// TestLineSessionGoroutines: a session of lines that waits for its client
// (initialized, nothing in flight) runs at most 2 goroutines of the
// proxy's: the one that reads its server and the writer to the server,
// which starts the first time a frame does not go at once: so a stdio
// server, whose pipe took every frame, runs the reader and its reaper
// (what goes to the client's streams is handed over by whoever queued it,
// since a stream's queue never blocks). Before the writer started on
// demand, 2 and 3; before the client's writer went, 3 and 4; before that,
// 6 and 8: one waited for the end of what went to the client through the
// streams anyway, one read a client input that the front never wrote, one
// waited for the server's exit to forget the session, one for the
// process's exit to count it.
func TestLineSessionGoroutines(t *testing.T) {
	const sessions = 10
	self, _ := os.Executable()
	for _, c := range []struct {
		name string
		cs   *httpx.Children
		want int
	}{
		{"in-process server", &httpx.Children{Dial: upstream.DialFunc(func(*zap.Logger) (upstream.Conn, error) { return newAnswering().conn(), nil })}, 2},
		{"stdio server", &httpx.Children{Dial: &upstream.Command{Argv: []string{self, echoChildArg}}}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			client, req := benchFront(t, &httpx.Sidecar{Logger: zap.NewNop(), Children: c.cs})
			before := proxyGoroutines()
			for i := range sessions {
				var resp fasthttp.Response
				req.SetBodyString(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}`, i))
				if err := client.DoTimeout(req, &resp, 10*time.Second); err != nil || len(resp.Header.Peek("Mcp-Session-Id")) == 0 {
					t.Fatalf("initialize: %v %s", err, resp.Body())
				}
			}
			if got := perSession(t, before, proxyGoroutines(), sessions); got > c.want {
				t.Errorf("%d goroutines per session, want at most %d", got, c.want)
			}
		})
	}
}

// TestOldClientSessionGoroutines: an old HTTP+SSE client's session of a
// Streamable HTTP upstream, initialized and waiting, runs 2: the reader of
// the upstream's GET stream and the writer to the upstream (whose POSTs
// wait for their answers' headers). Before the session's end was said by
// the upstream's end rather than waited for, 3; before that, 4, and before
// that 7 (the ones TestLineSessionGoroutines names, and one that waited
// for the upstream session's end to say so again).
func TestOldClientSessionGoroutines(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "s", Version: "1"}, nil)
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	t.Cleanup(srv.Close)
	base := strings.TrimSuffix(serveSidecar(t, &httpx.Sidecar{Upstream: srv.URL, Legacy: &httpx.Legacy{}}), "/mcp")
	const sessions = 5
	before := proxyGoroutines()
	for range sessions {
		c := openLegacyClient(t, base)
		c.post(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"old","version":"1"}}}`)
		if m := <-c.msgs; m["result"] == nil {
			t.Fatalf("initialize: %v", m)
		}
		c.post(`{"jsonrpc":"2.0","id":1,"method":"ping"}`) // after the GET stream is open
		<-c.msgs
	}
	if got := perSession(t, before, proxyGoroutines(), sessions); got > 2 {
		t.Errorf("%d goroutines per session, want at most 2", got)
	}
}

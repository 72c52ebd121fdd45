package httpx_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream/upstreamtest"
)

// TestOrderKeptOnEveryFront: the order test of every transport
// (upstreamtest.OrderServer.Run: a held call, then its cancel and a call
// reusing its id, round after round) on each HTTP front over each kind of
// upstream: old HTTP+SSE clients and Streamable HTTP clients, in front of
// a Streamable HTTP server (the relay, for the latter), an HTTP+SSE server
// and a stdio server. Each cancel reaches the server after the call it
// names and before the call that reuses its id; the client gets the answer
// of every call it did not cancel, and nothing of the ones it did. (The
// wrapper's is TestOrderKeptThroughTheWrapper, the bridge's
// TestOrderKeptThroughTheBridge.)
func TestOrderKeptOnEveryFront(t *testing.T) {
	t.Parallel()
	for _, front := range []string{"old-client", "streamable-client"} {
		for _, up := range []string{"streamable", "sse", "stdio"} {
			t.Run(front+"/"+up, func(t *testing.T) {
				t.Parallel()
				watchdog(t, 60*time.Second)
				srv := upstreamtest.NewOrderServer()
				sc := &httpx.Sidecar{Logger: zaptest.NewLogger(t), CancelGrace: 10 * time.Millisecond}
				switch up {
				case "streamable":
					hs := httptest.NewServer(srv)
					t.Cleanup(hs.Close)
					sc.Upstream = hs.URL + "/mcp"
				case "sse":
					hs := httptest.NewServer(srv.SSE())
					t.Cleanup(hs.Close)
					sc.Upstream, sc.UpstreamTransport, sc.Children = hs.URL+"/sse", httpx.TransportSSE, &httpx.Children{}
				case "stdio":
					sc.Children = &httpx.Children{Dial: upstream.DialFunc(func(*zap.Logger) (upstream.Conn, error) { return serveLines(srv), nil })}
				}
				var c upstreamtest.OrderClient
				if front == "old-client" {
					sc.Legacy = &httpx.Legacy{}
					c = &legacyOrder{openLegacyClient(t, strings.TrimSuffix(serveSidecar(t, sc), "/mcp"))}
				} else {
					c = &streamableOrder{c: childClient{t: t, url: serveSidecar(t, sc)}, got: make(chan map[string]any, 16)}
				}
				srv.Run(t, c, 20)
				if s, ok := c.(*streamableOrder); ok {
					s.held.Wait() // each held call's stream ends after its cancel
				}
			})
		}
	}
}

// legacyOrder is an old HTTP+SSE client as an order test's client.
type legacyOrder struct{ *legacyClient }

func (c *legacyOrder) Send(t *testing.T, msgs ...string) {
	for _, m := range msgs {
		c.post(m)
	}
}

func (c *legacyOrder) Next(t *testing.T) map[string]any {
	t.Helper()
	select {
	case m := <-c.msgs:
		return m
	case <-time.After(10 * time.Second): // bounds the test: it fails
		t.Fatal("the client got nothing")
		return nil
	}
}

// streamableOrder is a Streamable HTTP client as an order test's client:
// a POST each, in order; a held call's POST waits for its stream's end on
// a goroutine of its own.
type streamableOrder struct {
	c    childClient
	got  chan map[string]any
	held sync.WaitGroup
}

func (c *streamableOrder) Send(t *testing.T, msgs ...string) {
	for _, m := range msgs {
		if strings.Contains(m, `"hold":true`) {
			c.held.Go(func() {
				if _, body := c.c.post(m); strings.Contains(body, "data:") || strings.HasPrefix(body, "{") {
					t.Errorf("a cancelled call's stream carried %q, want nothing", body)
				}
			})
			continue
		}
		_, body := c.c.post(m)
		for _, msg := range messagesOf(body) {
			c.got <- msg
		}
	}
}

func (c *streamableOrder) Next(t *testing.T) map[string]any {
	t.Helper()
	select {
	case m := <-c.got:
		return m
	default:
		t.Fatal("the client got nothing")
		return nil
	}
}

// messagesOf returns the messages of a POST's answer: a JSON body, or the
// data of each event of an event stream.
func messagesOf(body string) []map[string]any {
	var out []map[string]any
	if strings.HasPrefix(body, "{") {
		var m map[string]any
		if json.Unmarshal([]byte(body), &m) == nil {
			out = append(out, m)
		}
		return out
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var m map[string]any
			if json.Unmarshal([]byte(data), &m) == nil {
				out = append(out, m)
			}
		}
	}
	return out
}

// serveLines returns srv served over pipes as a stdio server would be: a
// session's Conn, which ends at its stdin's end.
func serveLines(srv *upstreamtest.OrderServer) upstream.Conn {
	toR, toW := io.Pipe()
	fromR, fromW := io.Pipe()
	b := &linesBackend{in: fromR, out: toW, exited: make(chan struct{})}
	go func() {
		defer close(b.exited)
		srv.ServeLines(toR, fromW)
		fromW.Close()
	}()
	return b.conn()
}

type linesBackend struct {
	in     *io.PipeReader
	out    *io.PipeWriter
	exited chan struct{}
}

// conn returns the server as the Conn a Dialer returns.
func (b *linesBackend) conn() upstream.Conn {
	return upstream.NewPipeConn(b.in, b.out, upstream.PipeOptions{Stop: b.Stop})
}

func (b *linesBackend) Stop() {
	b.out.Close()
	b.in.Close() // a session that stopped reading does not hold the server
	<-b.exited
}

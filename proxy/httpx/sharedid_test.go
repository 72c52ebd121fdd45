package httpx_test

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx"
)

// TestSharedIDsKeptApart: claude.ai's connector sends every request with
// id 1, several at once on one session. Through the relay to the go-sdk
// server, each gets its own answer on its own stream (the second, renamed
// upstream, was refused with -32600); a cancel naming the shared id
// cancels each request that has it (the server sees every cancel), and
// none of them is answered after it.
func TestSharedIDsKeptApart(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	up := newUpstream(t, &mcp.StreamableHTTPOptions{})
	c := &rawClient{t: t, url: startSidecar(t, up.url, proxy.TrackerOptions{})}
	c.initialize()
	answers := make(chan string, 2)
	for _, key := range []string{"a", "b"} {
		go func() {
			_, body := answer(c, fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"say","arguments":{"key":%q}}}`, key))
			answers <- body
		}()
	}
	<-up.started
	<-up.started // both run upstream at once
	close(up.sayNow)
	var got []string
	for range 2 {
		body := <-answers
		if !strings.Contains(body, `"id":1`) {
			t.Errorf("an answer without the client's id: %s", body)
		}
		switch {
		case strings.Contains(body, "said a"):
			got = append(got, "a")
		case strings.Contains(body, "said b"):
			got = append(got, "b")
		default:
			t.Errorf("answer %s", body)
		}
	}
	if slices.Sort(got); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("answers %v, want one each", got)
	}

	streams := make(chan string, 2)
	for _, key := range []string{"x", "y"} {
		go func() {
			resp := c.post(fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"wait_cancel","arguments":{"key":%q},"_meta":{"progressToken":%q}}}`, key, key))
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			streams <- string(b)
		}()
	}
	<-up.started
	<-up.started
	resp := c.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"stop"}}`)
	resp.Body.Close()
	saw := []string{<-up.sawCancel, <-up.sawCancel}
	if slices.Sort(saw); !slices.Equal(saw, []string{"x", "y"}) {
		t.Errorf("the server saw cancels of %v, want x and y", saw)
	}
	for range 2 {
		if s := <-streams; strings.Contains(s, `"result"`) || strings.Contains(s, `"progress":2`) {
			t.Errorf("after the cancel a stream carried %s", s)
		}
	}
}

// TestSharedIDsKeptApartOnAStdioServer: the same on a stdio server's
// front: a second request with id 1 in flight goes to the server renamed
// (it was refused with -32600), its answer comes back as id 1 on its own
// stream, and a cancel of id 1 reaches the server for each request in
// flight that has it.
func TestSharedIDsKeptApartOnAStdioServer(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	c := &childClient{t: t, url: childSidecar(t, &httpx.Children{})}
	c.initialize()
	hang := make(chan string, 2)
	for range 2 {
		go func() {
			_, body := c.post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"hang"}}`)
			hang <- body
		}()
	}
	var got []string
	for len(got) < 2 { // both reached the server, one of them renamed
		got = append(got, c.received()...)
	}
	renamed := 0
	for _, line := range got {
		if strings.Contains(line, `"id":"mcp-cancel-proxy-`) {
			renamed++
		}
	}
	if renamed != 1 {
		t.Fatalf("the server received %q, want the second call renamed", got)
	}
	if code, body := c.post(`{"jsonrpc":"2.0","id":1,"method":"ping"}`); code != 200 || !strings.Contains(body, `"id":1`) || !strings.Contains(body, `"result"`) {
		t.Errorf("a third request with id 1: %d %s, want its own answer", code, body)
	}
	c.received() // the ping
	c.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"stop"}}`)
	var cancels []string
	for len(cancels) < 2 {
		for _, line := range c.received() {
			if strings.Contains(line, "notifications/cancelled") {
				cancels = append(cancels, line)
			}
		}
	}
	if !strings.Contains(strings.Join(cancels, " "), `"requestId":"mcp-cancel-proxy-`) {
		t.Errorf("cancels the server got: %q, want one for the renamed call too", cancels)
	}
	for range 2 {
		if body := <-hang; strings.Contains(body, `"result"`) || strings.Contains(body, `"error"`) {
			t.Errorf("a cancelled call's stream carried %s", body)
		}
	}
}

// idTracer records the ids of the requests whose spans start.
type idTracer struct {
	mu  sync.Mutex
	ids []string
}

func (r *idTracer) Start(from proxy.Peer, m *framing.Message, _ proxy.TraceContext) proxy.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	if from == proxy.Client {
		r.ids = append(r.ids, m.ID.String())
	}
	return proxy.NoSpan
}

// TestSharedChildSpansNameTheClientsIDs: the child shared by sessionless
// requests gets each request under an id of the proxy's own (h1, h2...),
// but the request's span names the id the client sent (issue 40, item 8:
// the spans showed the renamed ids).
func TestSharedChildSpansNameTheClientsIDs(t *testing.T) {
	t.Parallel()
	watchdog(t, 30*time.Second)
	rec := &idTracer{}
	cs := &httpx.Children{}
	cs.Session.NewTracer = func() proxy.Tracer { return rec }
	c := &childClient{t: t, url: childSidecar(t, cs)}
	for _, id := range []string{`7`, `"seven"`} {
		if status, body := c.post(`{"jsonrpc":"2.0","id":`+id+`,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
			"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "ping"); status != 200 || !strings.Contains(body, `"id":`+id) {
			t.Fatalf("ping %s on the shared child: %d %s", id, status, body)
		}
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if !slices.Equal(rec.ids, []string{`7`, `"seven"`}) {
		t.Errorf("the spans name %v, want the client's ids 7 and \"seven\"", rec.ids)
	}
}

// TestClaudeIDsOnLineSessions: claude.ai's connector sends initialize with
// id 1 and then every call with id 1. On a session of lines (a stdio
// server, an HTTP+SSE server), three calls in flight with id 1 and then a
// cancel of id 1 cancel each of the three on the server, and each call's
// stream ends without an answer, as over a Streamable HTTP upstream. On
// the code before, the router took the cancel for one of initialize's
// (long answered) and dropped it: the first call's stream never ended,
// and the other two were answered after the cancel.
func TestClaudeIDsOnLineSessions(t *testing.T) {
	t.Parallel()
	t.Run("stdio", func(t *testing.T) {
		watchdog(t, 30*time.Second)
		c := &childClient{t: t, url: childSidecar(t, &httpx.Children{})}
		claudeIDs(t, c, "hang", func() {
			for n := 0; n < 3; { // the calls: not initialize's lines, which come first
				for _, line := range c.received() {
					if strings.Contains(line, `"tools/call"`) {
						n++
					}
				}
			}
		}, func() {
			for n := 0; n < 3; {
				for _, line := range c.received() {
					if strings.Contains(line, "notifications/cancelled") {
						n++
					}
				}
			}
		})
	})
	t.Run("sse", func(t *testing.T) {
		watchdog(t, 30*time.Second)
		up, _, url := sseUpstream(t)
		c := &childClient{t: t, url: url}
		claudeIDs(t, c, "wait_cancel", func() {
			for range 3 {
				<-up.started
			}
		}, func() {
			for range 3 {
				<-up.sawCancel
			}
		})
	})
}

// claudeIDs initializes c's session with id 1, makes three calls of tool
// with id 1, waits until started says the server has them, cancels id 1,
// waits until cancelled says the server saw three cancels, and checks that
// each call's stream ended without an answer.
func claudeIDs(t *testing.T, c *childClient, tool string, started, cancelled func()) {
	t.Helper()
	if status, body := c.post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"claude-ai","version":"0.1.0"}}}`); status != 200 || c.session == "" {
		t.Fatalf("initialize: %d %s", status, body)
	}
	c.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	bodies := make(chan string, 3)
	for range 3 {
		go func() {
			_, body := c.post(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `","arguments":{"key":"k"}}}`)
			bodies <- body
		}()
	}
	started()
	if status, _ := c.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"stop"}}`); status != 202 {
		t.Fatalf("the cancel got %d", status)
	}
	cancelled()
	for range 3 {
		if body := <-bodies; strings.Contains(body, `"result"`) || strings.Contains(body, `"error"`) {
			t.Errorf("a cancelled call's stream carried %s", body)
		}
	}
}

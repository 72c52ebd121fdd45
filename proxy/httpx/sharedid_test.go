package httpx_test

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// TestSharedIDsKeptApart: claude.ai's connector sends every request with
// id 1, several at once on one session. Through the relay to the go-sdk
// server, each gets its own answer on its own stream (the second, renamed
// upstream, was refused with -32600); a cancel naming the shared id
// cancels each request that has it (the server sees every cancel), and
// none of them is answered after it.
func TestSharedIDsKeptApart(t *testing.T) {
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

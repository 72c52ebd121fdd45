package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// TestSSENoPostAfterTheStreamEnded: once the upstream's event stream has
// ended, the session's messages are no longer POSTed (before, a POST could
// start while the backend waited for those under way, and a WaitGroup
// reused under Wait crashed the proxy; FastMCP's session dying under a
// strict client's cancels found it).
func TestSSENoPostAfterTheStreamEnded(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			posts.Add(1)
			w.WriteHeader(http.StatusAccepted)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: endpoint\ndata: /message\n\n") // and the stream ends
	}))
	t.Cleanup(srv.Close)
	u, err := NewSSEUpstream(srv.URL+"/sse", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	c, err := u.Open(zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.Listen(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Next(); !errors.Is(err, ErrSessionEnded) {
		t.Fatalf("the event stream's end: %v, want ErrSessionEnded", err)
	}
	call := new(proxy.Call)
	if _, err := c.Send(context.Background(), []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`), []*proxy.Call{call}, Along{}); err == nil {
		t.Error("a call was taken after the event stream ended")
	}
	// The cancel waits for the call's POST to be answered, if there was one.
	c.Cancel(call, []byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`))
	if n := posts.Load(); n != 0 {
		t.Errorf("%d POSTs after the event stream ended, want none", n)
	}
}

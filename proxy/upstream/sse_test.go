package upstream

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"go.uber.org/zap/zaptest"
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
	conn, err := u.Dial(zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	b := NewLines(conn)
	defer b.Stop()
	<-b.Exited()
	b.Conn().Out.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}` + "\n"))
	// The second write waits for the first one's POST to be answered, if
	// there was one.
	b.Conn().Out.Write([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}` + "\n"))
	if n := posts.Load(); n != 0 {
		t.Errorf("%d POSTs after the event stream ended, want none", n)
	}
}

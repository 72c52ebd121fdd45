package httpx_test

import (
	"bytes"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// TestCancelNeverOvertakesItsRequest: a Streamable HTTP upstream reached
// as a client (the bridge's, an old client's) gets a request's cancel only
// after the request itself, however long the request's connection takes to
// open: the cancel waits for the request to be written, not for a timer.
// In a synctest bubble, so that "a long time" is a fake second and the
// check that the cancel did not go is exact.
func TestCancelNeverOvertakesItsRequest(t *testing.T) {
	var h fasthttp.ResponseHeader
	h.AppendBytes(nil) // fasthttp's Date refresher starts now, outside the bubble: it never ends
	synctest.Test(t, func(t *testing.T) {
		ln := fasthttputil.NewInmemoryListener()
		var mu sync.Mutex
		var got []string
		srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
			mu.Lock()
			got = append(got, string(ctx.PostBody()))
			mu.Unlock()
			if bytes.Contains(ctx.PostBody(), []byte(`"id":1`)) {
				ctx.SetContentType("application/json")
				ctx.SetBodyString(`{"jsonrpc":"2.0","id":1,"result":{}}`)
				return
			}
			ctx.SetStatusCode(fasthttp.StatusAccepted)
		}}
		go srv.Serve(ln)
		release := make(chan struct{})
		var dials atomic.Int32
		client := &fasthttp.Client{StreamResponseBody: true, Dial: func(string) (net.Conn, error) {
			if dials.Add(1) == 1 {
				<-release // the request's connection is slow to open
			}
			return ln.Dial()
		}}
		u, _ := url.Parse("http://upstream.test/mcp")
		back, err := (&upstream.StreamableUpstream{Endpoint: upstream.Endpoint{URL: u, Client: client}}).Dial(zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		out := back.Conn().Out
		go io.Copy(io.Discard, back.Conn().In) // what the upstream answers; ends with the backend
		out.Write([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow"}}` + "\n"))
		go out.Write([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}` + "\n"))

		time.Sleep(time.Second) // fake time: every timer the backend set has fired
		synctest.Wait()
		mu.Lock()
		early := append([]string(nil), got...)
		mu.Unlock()
		if n := dials.Load(); n != 1 || len(early) != 0 {
			t.Errorf("before the request was written: %d connections opened, the upstream got %q; want 1 and nothing", n, early)
		}

		close(release)
		synctest.Wait()
		mu.Lock()
		order := strings.Join(got, "\n")
		mu.Unlock()
		if i, j := strings.Index(order, `"method":"tools/call"`), strings.Index(order, `notifications/cancelled`); i < 0 || j < i {
			t.Errorf("the upstream got:\n%s\nwant the request, then its cancel", order)
		}
		back.Stop()
		<-back.Exited()
		ln.Close()
		srv.Shutdown()
		client.CloseIdleConnections()
		time.Sleep(time.Minute) // fake time: fasthttp's cleaners see nothing left to do, and end
	})
}

package upstream

import (
	"net"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestUpConn: an upstream connection runs its onRead once, before its next
// read, and a fasthttp response read from it leads back to it.
func TestUpConn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) { ctx.SetBodyString("ok") }}
	go srv.Serve(ln)
	defer srv.Shutdown()
	client := NewClient(0, 0)
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI("http://" + ln.Addr().String() + "/")
	if err := client.Do(req, resp); err != nil {
		t.Fatal(err)
	}
	up := LinkOf(resp)
	if up == nil {
		t.Fatal("the response does not lead to its connection")
	}
	resp.Body() // read to its end: the connection goes back to the pool
	resp.CloseBodyStream()
	ran := 0
	f := func() { ran++ }
	up.OnRead.Store(&f)
	for range 2 {
		if err := client.Do(req, resp); err != nil {
			t.Fatal(err)
		}
		if LinkOf(resp) != up || string(resp.Body()) != "ok" {
			t.Fatalf("another connection, or body %q", resp.Body())
		}
		resp.CloseBodyStream()
	}
	if ran != 1 {
		t.Errorf("onRead ran %d times, want 1", ran)
	}
}

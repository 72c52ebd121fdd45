package stream

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/conntest"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
)

// TestDetachedServes: a detached stream's head is the response's headers
// as they are once the handler returns (a header set after Serve goes
// too), chunked, saying that the connection closes; each event is a chunk;
// the stream's end is the chunked body's end, then the connection closes;
// Stop then finds nothing to wait for. Both ways: fasthttp's hijack
// goroutine writes it, or, where the server keeps hijacked connections, a
// goroutine of Detached's own.
func TestDetachedServes(t *testing.T) {
	for _, keeps := range []bool{false, true} {
		t.Run(fmt.Sprintf("keeps conns %v", keeps), func(t *testing.T) {
			d := &Detached{KeepsConns: keeps}
			st := NewEvents(clock.Real, 0)
			served := make(chan bool, 1)
			addr := serveOne(t, &fasthttp.Server{KeepHijackedConns: keeps, Handler: func(ctx *fasthttp.RequestCtx) {
				ServeDetached(ctx, st, d)
				ctx.Response.Header.Set("X-After", "yes")
				served <- ctx.Hijacked()
			}})
			c, resp := get(t, addr, "HTTP/1.1")
			defer c.Close()
			if !<-served {
				t.Fatal("the stream was not detached")
			}
			if resp.StatusCode != 200 || !resp.Close || resp.TransferEncoding == nil || resp.Header.Get("X-After") != "yes" ||
				resp.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("head: %d close %v chunked %v headers %v", resp.StatusCode, resp.Close, resp.TransferEncoding, resp.Header)
			}
			st.SendEvent([]byte("data: 1\n\n"), false)
			st.SendEvent([]byte("data: 2\n\n"), false)
			br := bufio.NewReader(resp.Body)
			for _, want := range []string{"data: 1\n", "\n", "data: 2\n", "\n"} {
				if line, err := br.ReadString('\n'); line != want {
					t.Fatalf("read %q (%v), want %q", line, err, want)
				}
			}
			st.End()
			if rest, err := io.ReadAll(br); err != nil || len(rest) > 0 {
				t.Fatalf("after the end: %q, %v; want the body's clean end", rest, err)
			}
			if n, err := c.Read(make([]byte, 1)); n != 0 || err != io.EOF {
				t.Fatalf("the connection: read %d, %v; want it closed", n, err)
			}
			if ok, n := d.Stop(time.Second); !ok {
				t.Fatalf("Stop: %d streams still written", n)
			}
		})
	}
}

// TestDetachedStop: Stop ends the streams being written (their end
// function), then waits for them; the client sees a clean end. Once
// stopped, Serve declines, and the stream is served the usual way.
func TestDetachedStop(t *testing.T) {
	d := &Detached{}
	streams := make(chan *Events, 2)
	detached := make(chan bool, 2)
	addr := serveOne(t, &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		st := NewEvents(clock.Real, 0)
		streams <- st
		ServeDetached(ctx, st, d)
		detached <- ctx.Hijacked()
	}})
	c, resp := get(t, addr, "HTTP/1.1")
	defer c.Close()
	<-streams
	if !<-detached {
		t.Fatal("the stream was not detached")
	}
	if ok, n := d.Stop(5 * time.Second); !ok {
		t.Fatalf("Stop: %d streams still written", n)
	}
	if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) > 0 {
		t.Fatalf("after Stop: %q, %v; want the body's clean end", rest, err)
	}
	c2, resp2 := get(t, addr, "HTTP/1.1")
	defer c2.Close()
	st := <-streams
	if <-detached {
		t.Fatal("a stream was detached after Stop")
	}
	st.SendEvent([]byte("data: x\n\n"), false)
	st.End()
	if body, err := io.ReadAll(resp2.Body); string(body) != "data: x\n\n" {
		t.Fatalf("served the usual way: %q, %v", body, err)
	}
}

// TestDetachedDeclinesHTTP10: an HTTP/1.0 client, which reads no chunks,
// gets its stream the usual way.
func TestDetachedDeclinesHTTP10(t *testing.T) {
	d := &Detached{}
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetProtocol("HTTP/1.0")
	if d.Serve(&ctx, NewEvents(clock.Real, 0), func() {}) {
		t.Fatal("an HTTP/1.0 stream was detached")
	}
}

// TestDetachedStopClosesWhatNeverRan: a stream whose hijack never runs
// (the connection failed on fasthttp's side first) is closed by Stop,
// which does not wait for it; a hijack that runs after Stop writes nothing.
func TestDetachedStopClosesWhatNeverRan(t *testing.T) {
	d := &Detached{}
	var ctx fasthttp.RequestCtx
	body := &closeCount{}
	if !d.Serve(&ctx, body, func() {}) {
		t.Fatal("not detached")
	}
	var e *detached
	for k := range d.open {
		e = k
	}
	if ok, n := d.Stop(time.Second); !ok || body.closed != 1 {
		t.Fatalf("Stop: ok %v (%d left), body closed %d times; want it closed once", ok, n, body.closed)
	}
	rec := &conntest.Recorder{}
	d.run(e, &ctx.Response.Header, rec)
	if got := rec.Took(); got != "" || body.closed != 1 {
		t.Fatalf("a hijack after Stop wrote %q, closed the body %d times", got, body.closed)
	}
}

// TestChunks: each write is one chunk in one write; an empty one, which
// would end the body, writes nothing.
func TestChunks(t *testing.T) {
	rec := &conntest.Recorder{}
	w := chunks{rec}
	w.Write([]byte("data: hello\n\n"))
	w.Write(nil)
	big := make([]byte, maxPooled+1)
	w.Write(big)
	want := "d\r\ndata: hello\n\n\r\n|" + fmt.Sprintf("%x\r\n%s\r\n", len(big), big)
	if got := rec.Took(); got != want {
		t.Fatalf("wrote %.40q..., want %.40q...", got, want)
	}
}

type closeCount struct{ closed int }

func (b *closeCount) WriteTo(io.Writer) (int64, error) { return 0, nil }
func (b *closeCount) Close() error                     { b.closed++; return nil }

// serveOne serves srv on a loopback port until the test ends.
func serveOne(t *testing.T, srv *fasthttp.Server) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	return ln.Addr().String()
}

// get sends a GET on a connection of its own and reads the response's head.
func get(t *testing.T, addr, proto string) (net.Conn, *http.Response) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET /mcp %s\r\nHost: %s\r\n\r\n", proto, addr)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c, resp
}

package upstream_test

import (
	"bufio"
	"io"
	"net/http/httptest"
	"net/url"
	"os"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream/upstreamtest"
)

// TestOrderKeptThroughTheBridge: a client of the bridge (a session of
// lines over the Conn of a Streamable HTTP or an HTTP+SSE server) that
// sends a call, then, once the server has it, its cancel and a new call
// reusing the id in one burst, round after round: the server reads every
// cancel after the request it names and before the request that reuses
// its id (which the core renames), never two calls in flight under one
// id; the client gets the answer of every call it did not cancel, and
// nothing of the ones it did (upstreamtest.OrderServer.Run).
func TestOrderKeptThroughTheBridge(t *testing.T) {
	for _, kind := range []string{"streamable", "sse", "stdio"} {
		t.Run(kind, func(t *testing.T) {
			srv := upstreamtest.NewOrderServer()
			var d upstream.Dialer
			if kind == "stdio" {
				d = upstream.DialFunc(func(*zap.Logger) (upstream.Conn, error) { return servePipes(t, srv), nil })
			} else if kind == "sse" {
				hs := httptest.NewServer(srv.SSE())
				t.Cleanup(hs.Close) // after the bridge has ended (cleanups run last first)
				up, err := upstream.NewSSEUpstream(hs.URL+"/sse", 0, 0)
				if err != nil {
					t.Fatal(err)
				}
				d = up
			} else {
				hs := httptest.NewServer(srv)
				t.Cleanup(hs.Close)
				u, _ := url.Parse(hs.URL + "/mcp")
				d = &upstream.StreamableUpstream{Endpoint: upstream.Endpoint{URL: u, Client: upstream.NewClient(0, 0)}}
			}
			toBridge, lines := bridged(t, d, zaptest.NewLogger(t))
			srv.Run(t, upstreamtest.LineClient{W: toBridge, R: lines}, 40)
		})
	}
}

// bridged runs the bridge (a stdio session over a session d dials) until
// the test ends, and returns where its client writes and what it reads.
func bridged(t testing.TB, d upstream.Dialer, log *zap.Logger) (io.Writer, *bufio.Reader) {
	conn, err := d.Dial(log)
	if err != nil {
		t.Fatal(err)
	}
	back := stdio.NewLines(conn)
	cIn, toBridge := io.Pipe()
	fromBridge, cOut := io.Pipe()
	sess := stdio.NewSession(stdio.Options{Logger: log})
	done := make(chan error, 1)
	go func() { done <- sess.Run(stdio.Conn{In: cIn, Out: cOut}, back.Conn()) }()
	t.Cleanup(func() {
		toBridge.Close()
		back.Stop()
		<-back.Exited()
		<-done
		<-sess.ReaderDone()
	})
	return toBridge, bufio.NewReader(fromBridge)
}

// servePipes serves srv's stdio transport over a pair of OS pipes (the
// writev path a stdio server's stdin takes) as a PipeConn, whose Close
// ends it.
func servePipes(t testing.TB, srv *upstreamtest.OrderServer) upstream.Conn {
	toR, toW, fromR, fromW := osPipes(t)
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.ServeLines(toR, fromW) // until its stdin ends
		fromW.Close()
		toR.Close()
	}()
	return upstream.NewPipeConn(fromR, toW, upstream.PipeOptions{Stop: func() {
		toW.Close()
		<-served
		fromR.Close()
	}})
}

// osPipes returns two OS pipes: the server's stdin (toR, toW) and its
// stdout (fromR, fromW).
func osPipes(t testing.TB) (toR, toW, fromR, fromW *os.File) {
	t.Helper()
	toR, toW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fromR, fromW, err = os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	return toR, toW, fromR, fromW
}

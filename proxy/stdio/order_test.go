package stdio_test

import (
	"bufio"
	"io"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream/upstreamtest"
)

// TestOrderKeptThroughTheWrapper: the order test of every transport
// (upstreamtest.OrderServer.Run) on the wrapper's relay between two pairs
// of pipes: each cancel reaches the stdio server after the call it names
// and before the call that reuses its id, and the client gets the answer
// of every call it did not cancel, nothing of the ones it did.
func TestOrderKeptThroughTheWrapper(t *testing.T) {
	watchdog(t, 20*time.Second)
	srv := upstreamtest.NewOrderServer()
	cIn, toProxy := io.Pipe()
	fromProxy, cOut := io.Pipe()
	sIn, sInW := io.Pipe()
	sOutR, sOut := io.Pipe()
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.ServeLines(sOutR, sInW)
		sInW.Close() // the server exits at its stdin's end
	}()
	sess := stdio.NewSession(stdio.Options{})
	done := make(chan error, 1)
	go func() {
		done <- sess.Run(stdio.Conn{In: cIn, Out: cOut}, stdio.PipeServer(sIn, sOut, upstream.PipeOptions{}))
	}()
	t.Cleanup(func() {
		toProxy.Close() // the client's end: the session closes the server's stdin
		fromProxy.Close()
		<-done
		<-served
		<-sess.ReaderDone()
	})
	srv.Run(t, upstreamtest.LineClient{W: toProxy, R: bufio.NewReader(fromProxy)}, 40)
}

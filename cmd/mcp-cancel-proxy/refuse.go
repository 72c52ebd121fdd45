package main

import (
	"bufio"
	"io"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// refusalWait bounds how long a proxy that cannot serve answers its
// client's requests before it exits.
const refusalWait = 10 * time.Second

// refuseClient answers the client's requests on stdin (its initialize, or a
// 2026-07-28 client's server/discover, and the initialize the go-sdk tries
// after a refused server/discover) with the proxy's JSON-RPC error saying
// why it cannot serve (its server did not start, its upstream cannot be
// reached or refused the sign-in), so that the client shows the cause:
// before, it saw only "Connection closed", and a client that starts with
// server/discover waited for an answer until its own timeout.
// Notifications, and lines that do not parse, are passed over; it returns
// when stdin ends (the client gave up), or after refusalWait. The error's
// kind is "unavailable".
func refuseClient(stdin io.Reader, stdout io.Writer, why string, maxFrame int) {
	done := make(chan struct{})
	go func() { // left blocked on stdin if the client says nothing: the process exits after
		defer close(done)
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 0, 64<<10), max(maxFrame, 64<<10))
		for sc.Scan() {
			var f framing.Frame
			if f.Parse(sc.Bytes()) != nil {
				continue
			}
			var replies [][]byte
			for _, m := range f.Msgs {
				if m.Kind == framing.KindRequest {
					replies = append(replies, proxy.ErrorReplyKind(m.ID, proxy.CodeServerGone, "mcp-cancel-proxy: "+why, "unavailable"))
				}
			}
			if len(replies) > 0 {
				stdout.Write(append(proxy.JoinFrame(replies, f.Batch), '\n'))
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(refusalWait):
	}
}

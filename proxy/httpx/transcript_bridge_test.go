package httpx_test

import (
	"bytes"
	"io"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/internal/transcript"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/upstream"
)

// TestTranscriptsThroughTheBridge replays every golden transcript through
// the bridge, a stdio client's session over a Streamable HTTP or an
// HTTP+SSE upstream (what `mcp-cancel-proxy --upstream URL` runs once it
// has found out which the upstream speaks), to the scripted servers of the
// HTTP replay. Over stdio one stream carries every answer to the client,
// so the rules of the stdio relay hold (the shared-id transcript among
// them).
func TestTranscriptsThroughTheBridge(t *testing.T) {
	t.Parallel()
	for _, up := range []string{"streamable", "sse"} {
		transcript.ForEach(t, "bridge-to-"+up, func(t *testing.T, tr *transcript.Transcript) {
			r := newReplay(t, tr)
			r.bridged = true
			r.maxFrame = tr.MaxFrameSize
			r.bridge(up)
			r.play(tr)
		})
	}
}

// bridge starts the bridge's session over a backend of the upstream kind
// named, its client's lines written by post and read into the client's
// inbox.
func (r *replay) bridge(kind string) {
	r.t.Helper()
	var conn upstream.Conn
	var err error
	switch kind {
	case "streamable":
		var up *upstream.StreamableUpstream
		if up, err = upstream.NewStreamableUpstream(r.scriptedStreamable(), r.maxFrame, 0); err == nil {
			conn, err = up.Dial(zaptest.NewLogger(r.t))
		}
	case "sse":
		var up *upstream.SSEUpstream
		if up, err = upstream.NewSSEUpstream(r.scriptedSSE(), r.maxFrame, 0); err == nil {
			conn, err = up.Dial(zaptest.NewLogger(r.t))
		}
	}
	if err != nil {
		r.t.Fatal(err)
	}
	back := stdio.NewLines(conn)
	opts := stdio.Options{OnEvent: r.onEvent, Logger: zaptest.NewLogger(r.t), MaxFrameSize: r.maxFrame, DeferCancels: true} // as the bridge's
	if r.policy != nil {
		opts.Governor = r.policy.Governor("s1")
	}
	sess := stdio.NewSession(opts)
	cIn, toBridge := io.Pipe()
	fromBridge, cOut := io.Pipe()
	ran := make(chan error, 1)
	go func() { ran <- sess.Run(stdio.Conn{In: cIn, Out: cOut}, back.Conn()) }()
	r.readers.Add(1)
	go func() {
		defer r.readers.Done()
		rd := framing.NewReader(fromBridge, 0)
		for {
			line, err := rd.Read(nil)
			if err != nil {
				return
			}
			r.client.put("stdout", bytes.Clone(line))
		}
	}()
	r.lines, r.stats = toBridge, sess.Stats
	r.shutdown = func() { sess.CancelAll(proxy.SourceShutdown, "the proxy is shutting down") } // as the bridge's signal does
	r.t.Cleanup(func() {
		toBridge.Close() // the client leaves: the session ends, and its backend
		back.Stop()
		<-ran
		<-sess.ReaderDone() // the client's reader may log after Run returns
		fromBridge.Close()
		for i := len(r.ends) - 1; i >= 0; i-- {
			r.ends[i]()
		}
		r.readers.Wait()
	})
}

package stdio_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/internal/transcript"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
)

// TestTranscripts replays every golden transcript (package transcript)
// through the stdio relay, where each peer receives frames in the order of
// the steps.
func TestTranscripts(t *testing.T) {
	transcript.ForEach(t, "stdio", func(t *testing.T, tr *transcript.Transcript) {
		clk := clock.NewFake(time.Unix(0, 0))
		opts := stdio.Options{MaxFrameSize: tr.MaxFrameSize, DeferCancels: true} // as the wrapper's
		e, err := tr.Engine(clk)
		if err != nil {
			t.Fatal(err)
		}
		if e != nil {
			t.Cleanup(e.Shutdown) // after the harness's end
			opts.Governor = e.Governor("s1")
		}
		h := newHarness(t, opts)
		h.clk = clk
		if tr.ServerCapabilities != "{}" && !tr.Initializes() { // the server declares them in its answer to an initialize
			h.initialize(tr)
		}
		for _, st := range tr.Steps {
			if err := h.step(st); err != nil {
				t.Fatalf("%s, steps line %d: %v", tr.Name, st.Line, err)
			}
		}
	})
}

// initialize plays the harness's initialize, out of the steps' sight, and
// the server's answer with the transcript's capabilities.
func (h *harness) initialize(tr *transcript.Transcript) {
	h.t.Helper()
	h.client(transcript.Initialize)
	if err := h.gets(h.fromProxyS, transcript.Initialize); err != nil {
		h.t.Fatalf("initialize: %v", err)
	}
	h.server(tr.InitializeAnswer())
	if err := h.gets(h.fromProxyC, tr.ClientInitializeAnswer()); err != nil {
		h.t.Fatalf("initialize: %v", err)
	}
}

// step plays one step of a transcript.
func (h *harness) step(st transcript.Step) error {
	h.t.Helper()
	switch st.Op {
	case "c>", "c~":
		h.client(st.Arg)
	case "s>":
		h.server(st.Arg)
	case "c<":
		return h.gets(h.fromProxyC, st.Arg)
	case "s<":
		return h.gets(h.fromProxyS, st.Arg)
	case "sync":
		h.sync()
	case "stats":
		return transcript.CheckStats(h.sess.Stats(), st.Arg)
	case "clock":
		d, _ := st.Moved()
		h.clk.Advance(d)
	case "era": // over stdio a revision changes no rule of a transcript's
	case "close":
		return fmt.Errorf("a stdio client has no stream to leave: the transcript's not-on must name this transport")
	case "trace":
		return fmt.Errorf("a stdio client sends no HTTP header to trace: the transcript's not-on must name this transport")
	case "cut", "end": // the server exits
		h.toProxyS.Close()
	case "shutdown": // as the wrapper's signal does
		h.sess.CancelAll(proxy.SourceShutdown, "the proxy is shutting down")
	}
	return nil
}

// gets reads the next frame the proxy sent a peer and compares it with
// want, as the transcripts compare ("*" matches anything).
func (h *harness) gets(r *lineReader, want string) error {
	h.t.Helper()
	got, err := r.r.Read(nil)
	if err != nil {
		return fmt.Errorf("reading from the proxy: %v (want %s)", err, want)
	}
	if !transcript.SameJSON(got, want) {
		return fmt.Errorf("got\n  %s\nwant\n  %s", got, want)
	}
	return nil
}

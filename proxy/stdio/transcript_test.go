package stdio_test

import (
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
		var opts stdio.Options
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
		for _, st := range tr.Steps {
			if err := h.step(st); err != nil {
				t.Fatalf("%s, steps line %d: %v", tr.Name, st.Line, err)
			}
		}
	})
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
		h.clientGets(st.Arg)
	case "s<":
		h.serverGets(st.Arg)
	case "sync":
		h.sync()
	case "stats":
		return transcript.CheckStats(h.sess.Stats(), st.Arg)
	case "clock":
		d, _ := st.Moved()
		h.clk.Advance(d)
	case "shutdown": // as the wrapper's signal does
		h.sess.CancelAll(proxy.SourceShutdown, "the proxy is shutting down")
	}
	return nil
}

package stdio_test

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
)

// Golden transcripts (testdata/transcripts/*.txtar) state the proxy's
// frame rules as exchanges: what each peer sends, and what each must then
// receive. The archive's comment says what the transcript shows; its file
// "steps" holds one step a line:
//
//	c> FRAME   the client sends FRAME
//	s> FRAME   the server sends FRAME
//	s< FRAME   the server receives FRAME next (compared as JSON)
//	c< FRAME   the client receives FRAME next
//	sync       nothing else has reached either peer
//	stats K=N  the session's counters, as many as named (forwarded,
//	           cancels_forwarded, cancels_dropped, withdrawn,
//	           responses_suppressed, progress_suppressed, dropped,
//	           proxy_errors)
//
// Blank lines and lines starting with # are skipped. Each transcript is
// replayed here through the stdio relay; the same files are meant for the
// other transports.
func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/transcripts/*.txtar")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			a, err := txtar.ParseFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var steps []byte
			for _, f := range a.Files {
				if f.Name == "steps" {
					steps = f.Data
				}
			}
			if steps == nil {
				t.Fatal("no steps file")
			}
			h := newHarness(t, stdio.Options{})
			for n, line := range strings.Split(string(steps), "\n") {
				if err := h.step(strings.TrimSpace(line)); err != nil {
					t.Fatalf("%s, steps line %d: %v", file, n+1, err)
				}
			}
		})
	}
}

// step plays one line of a transcript.
func (h *harness) step(line string) error {
	h.t.Helper()
	op, arg, _ := strings.Cut(line, " ")
	switch op {
	case "", "#":
	case "c>":
		h.client(arg)
	case "s>":
		h.server(arg)
	case "c<":
		h.clientGets(arg)
	case "s<":
		h.serverGets(arg)
	case "sync":
		h.sync()
	case "stats":
		return h.checkStats(arg)
	default:
		if !strings.HasPrefix(op, "#") {
			return fmt.Errorf("unknown step %q", op)
		}
	}
	return nil
}

// checkStats compares the counters named in arg ("forwarded=3 ...").
func (h *harness) checkStats(arg string) error {
	st := h.sess.Stats()
	have := map[string]int64{"forwarded": st.Forwarded, "cancels_forwarded": st.CancelsForwarded,
		"cancels_dropped": st.CancelsDropped, "withdrawn": st.Withdrawn, "responses_suppressed": st.ResponsesSuppressed,
		"progress_suppressed": st.ProgressSuppressed, "dropped": st.Dropped, "proxy_errors": st.ProxyErrors}
	for _, kv := range strings.Fields(arg) {
		k, v, _ := strings.Cut(kv, "=")
		want, err := strconv.ParseInt(v, 10, 64)
		got, known := have[k]
		if err != nil || !known {
			return fmt.Errorf("bad counter %q", kv)
		}
		if got != want {
			return fmt.Errorf("%s = %d, want %d (all: %+v)", k, got, want, st)
		}
	}
	return nil
}

package check

import (
	"bufio"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fake is a scripted MCP server over pipes: a call works for work,
// reporting progress every step, then answers; what it does on a cancel is
// its mode's.
type fake struct {
	// "honour", "late", "ignore", "lose-race", "answer-cancels",
	// "close-on-cancel", "lose-first" (honours, but its first call fails at
	// once, as a proxy's lost try did), "escapes" (honours, and names
	// itself with a terminal's escape sequences)
	mode string
	work time.Duration
	step time.Duration

	mu      sync.Mutex
	w       io.Writer
	stopped map[string]chan struct{} // per call id: closed by its cancel
}

func (f *fake) send(v map[string]any) {
	v["jsonrpc"] = "2.0"
	b, _ := json.Marshal(v)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.w.Write(append(b, '\n'))
}

// serve reads requests from r until it ends.
func (f *fake) serve(r io.ReadCloser, w io.WriteCloser) {
	defer w.Close()
	defer r.Close() // a dead server: the client's writes fail, as on a closed pipe
	f.w, f.stopped = w, map[string]chan struct{}{}
	var wg sync.WaitGroup
	defer wg.Wait()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string
			Params struct {
				RequestID json.RawMessage `json:"requestId"`
				Meta      struct {
					Token json.RawMessage `json:"progressToken"`
				} `json:"_meta"`
			}
		}
		json.Unmarshal(sc.Bytes(), &m)
		switch m.Method {
		case "initialize":
			name := "fake"
			if f.mode == "escapes" {
				name = "fake\x1b]0;owned\x07\x1b[2J\u009b31m"
			}
			f.send(map[string]any{"id": m.ID, "result": map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
				"serverInfo": map[string]any{"name": name, "version": "1"}}})
		case "tools/list":
			f.send(map[string]any{"id": m.ID, "result": map[string]any{"tools": []any{map[string]any{"name": "work"}}}})
		case "ping":
			f.send(map[string]any{"id": m.ID, "result": map[string]any{}})
		case "tools/call":
			if f.mode == "lose-first" && string(m.ID) == `"check-cancel-1"` {
				f.send(map[string]any{"id": m.ID, "error": map[string]any{"code": -32603, "message": "the upstream could not be reached"}})
				continue
			}
			stop := make(chan struct{})
			f.mu.Lock()
			f.stopped[string(m.ID)] = stop
			f.mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); f.call(m.ID, m.Params.Meta.Token, stop) }()
		case "notifications/cancelled":
			if f.mode == "close-on-cancel" {
				return
			}
			if f.mode == "answer-cancels" {
				f.send(map[string]any{"id": nil, "error": map[string]any{"code": -32600, "message": "unknown request"}})
			}
			f.mu.Lock()
			stop := f.stopped[string(m.Params.RequestID)]
			delete(f.stopped, string(m.Params.RequestID))
			f.mu.Unlock()
			if stop != nil && !(f.mode == "lose-race" && string(m.Params.RequestID) == `"check-race"`) {
				close(stop)
			}
		}
	}
}

// call does a call's work.
func (f *fake) call(id, token json.RawMessage, stop <-chan struct{}) {
	tick := time.NewTicker(f.step)
	defer tick.Stop()
	end := time.After(f.work)
	for n := 1; ; n++ {
		select {
		case <-stop:
			switch f.mode {
			case "late":
				f.send(map[string]any{"id": id, "result": map[string]any{"content": []any{}, "isError": true}})
				return
			case "ignore":
				stop = nil
				continue
			}
			return
		case <-tick.C:
			f.send(map[string]any{"method": "notifications/progress", "params": map[string]any{"progressToken": token, "progress": n}})
		case <-end:
			f.send(map[string]any{"id": id, "result": map[string]any{"content": []any{map[string]any{"type": "text", "text": "done"}}}})
			return
		}
	}
}

// pipes is the fake server's end of two pipes, as the checker's Lines.
func pipes(in *io.PipeReader, out *io.PipeWriter) Lines {
	return Lines{In: in, Out: out, Stop: func() { out.Close(); in.Close() }}
}

// runFake checks the fake in mode, in a bubble of fake time.
func runFake(t *testing.T, mode string) *Report { return runFakeWith(t, mode, Options{}) }

// runFakeWith is runFake with o (its Tool and Runs set here).
func runFakeWith(t *testing.T, mode string, o Options) *Report {
	t.Helper()
	var r *Report
	synctest.Test(t, func(t *testing.T) {
		toServer, fromClient := io.Pipe()
		toClient, fromServer := io.Pipe()
		// A step that does not divide the 1 s before the cancel plus the 5 s
		// of listening: with 200 ms, a progress and the end of listening fell
		// on the same instant, and which came first was the scheduler's
		// choice (the report said 5s or 4.8s).
		f := &fake{mode: mode, work: 10 * time.Second, step: 350 * time.Millisecond}
		done := make(chan struct{})
		go func() { defer close(done); f.serve(toServer, fromServer) }()
		var err error
		o.Tool, o.Runs = "work", 2
		r, err = Run(pipes(toClient, fromClient), o)
		if err != nil {
			t.Fatal(err)
		}
		<-done
	})
	return r
}

// verdicts is the report's lines as "check=verdict/rank".
func verdicts(r *Report) string {
	var out []string
	for _, l := range r.Lines {
		v := l.Check + "=" + string(l.Verdict)
		if l.Verdict == Fail {
			v += "/" + l.Rank
		}
		out = append(out, v)
	}
	return strings.Join(out, " ")
}

func TestVerdicts(t *testing.T) {
	for _, c := range []struct{ mode, want string }{
		{"honour", "cancel=pass late-answer=pass progress-after-cancel=pass silence=info race=pass cancel-finished=pass cancel-unknown=pass cancel-initialize=pass task-cancel=skip"},
		{"late", "cancel=pass late-answer=fail/SHOULD progress-after-cancel=pass silence=info race=pass cancel-finished=pass cancel-unknown=pass cancel-initialize=pass task-cancel=skip"},
		{"ignore", "cancel=fail/SHOULD late-answer=pass progress-after-cancel=fail/SHOULD silence=info race=skip cancel-finished=pass cancel-unknown=pass cancel-initialize=pass task-cancel=skip"},
		{"lose-race", "cancel=pass late-answer=pass progress-after-cancel=pass silence=info race=fail/SHOULD cancel-finished=pass cancel-unknown=pass cancel-initialize=pass task-cancel=skip"},
		{"answer-cancels", "cancel=pass late-answer=pass progress-after-cancel=pass silence=info race=pass cancel-finished=fail/MUST cancel-unknown=fail/MUST cancel-initialize=fail/MUST task-cancel=skip"},
		{"close-on-cancel", "cancel=fail/MUST"},
		{"lose-first", "tries=info cancel=pass late-answer=pass progress-after-cancel=pass silence=info race=pass cancel-finished=pass cancel-unknown=pass cancel-initialize=pass task-cancel=skip"},
	} {
		t.Run(c.mode, func(t *testing.T) {
			r := runFake(t, c.mode)
			if got := verdicts(r); got != c.want {
				var b strings.Builder
				Print(&b, r)
				t.Errorf("verdicts\n got %s\nwant %s\n%s", got, c.want, b.String())
			}
			if want := strings.Contains(c.want, "/MUST"); r.BrokeMust() != want {
				t.Errorf("BrokeMust = %v, want %v", r.BrokeMust(), want)
			}
		})
	}
}

// TestSilenceIsMeasured: a server that reports progress to the end of the
// watch has its silence at the watch's length (fake time).
func TestSilenceIsMeasured(t *testing.T) {
	r := runFake(t, "ignore")
	for _, d := range r.Silence {
		if d < 4800*time.Millisecond || d > 5*time.Second {
			t.Errorf("silence %v, want 4.8 to 5 s (progress every 200 ms to the end of the 5 s watch)", d)
		}
	}
}

// TestReportSays: what the lines say, where words matter (issue 39, item
// 6): a server that stops and only answers is not said to go on; progress
// still coming when listening ended is "at least"; "no answer" is within
// the listening window; a lost try is told; a server's own strings cannot
// put escape sequences into the printed report.
func TestReportSays(t *testing.T) {
	printed := func(mode string) string {
		var b strings.Builder
		Print(&b, runFake(t, mode))
		return b.String()
	}
	for mode, wants := range map[string][]string{
		"late":       {"stopped: no progress after the cancel (2 of 2 tries), though it answered the cancelled call in 2 (late-answer)"},
		"ignore":     {"progress went on for at least 4.95s after the cancel, still going when listening ended, in 2 of 2 tries"},
		"honour":     {"no answer after the cancel within 5s", "no progress after the cancel within 5s (2 of 2 tries)"},
		"lose-first": {`1 of 2 tries were answered before their cancel (the first with the error -32603 "the upstream could not be reached"`},
		"escapes":    {`fake\x1b]0;owned\a\x1b[2J\u009b31m 1, protocol`},
	} {
		out := printed(mode)
		for _, want := range wants {
			if !strings.Contains(out, want) {
				t.Errorf("%s: the report lacks %q:\n%s", mode, want, out)
			}
		}
		if strings.ContainsAny(out, "\x1b\x07\u009b") {
			t.Errorf("%s: the report holds control characters:\n%q", mode, out)
		}
	}
}

// TestOverHTTPClaimsNoStop: over HTTP no line says a handler stopped or
// honoured its cancel: that cannot be seen there (docs/check.md). Before,
// a FastMCP tool that ran to its end behind HTTP was reported "ok cancel
// stopped".
func TestOverHTTPClaimsNoStop(t *testing.T) {
	for _, mode := range []string{"honour", "late"} {
		var b strings.Builder
		r := runFakeWith(t, mode, Options{OverHTTP: true})
		Print(&b, r)
		out := b.String()
		if strings.Contains(out, "honoured") || strings.Contains(out, "stopped:") || !strings.Contains(out, unseenOverHTTP) {
			t.Errorf("%s over HTTP:\n%s", mode, out)
		}
		if got := verdicts(r); !strings.Contains(got, "cancel=pass") || !strings.Contains(got, "race=pass") {
			t.Errorf("%s over HTTP: verdicts %s", mode, got)
		}
	}
}

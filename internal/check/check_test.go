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

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
)

// fake is a scripted MCP server over pipes: a call works for work,
// reporting progress every step, then answers; what it does on a cancel is
// its mode's.
type fake struct {
	mode string // "honour", "late", "ignore", "lose-race", "answer-cancels", "close-on-cancel"
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
			f.send(map[string]any{"id": m.ID, "result": map[string]any{"protocolVersion": "2025-11-25", "capabilities": map[string]any{},
				"serverInfo": map[string]any{"name": "fake", "version": "1"}}})
		case "tools/list":
			f.send(map[string]any{"id": m.ID, "result": map[string]any{"tools": []any{map[string]any{"name": "work"}}}})
		case "ping":
			f.send(map[string]any{"id": m.ID, "result": map[string]any{}})
		case "tools/call":
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

// pipes is the fake server's end of two pipes as an upstream.Backend.
type pipes struct {
	in  *io.PipeReader
	out *io.PipeWriter
}

func (p pipes) Conn() stdio.Conn { return stdio.Conn{In: p.in, Out: p.out} }
func (p pipes) Stop()            { p.out.Close(); p.in.Close() }
func (p pipes) Exited() <-chan struct{} {
	return nil // not asked by the checker
}

// runFake checks the fake in mode, in a bubble of fake time.
func runFake(t *testing.T, mode string) *Report {
	t.Helper()
	var r *Report
	synctest.Test(t, func(t *testing.T) {
		toServer, fromClient := io.Pipe()
		toClient, fromServer := io.Pipe()
		f := &fake{mode: mode, work: 10 * time.Second, step: 200 * time.Millisecond}
		done := make(chan struct{})
		go func() { defer close(done); f.serve(toServer, fromServer) }()
		var err error
		r, err = Run(pipes{toClient, fromClient}, Options{Tool: "work", Runs: 2})
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
		{"late", "cancel=fail/SHOULD late-answer=fail/SHOULD progress-after-cancel=pass silence=info race=pass cancel-finished=pass cancel-unknown=pass cancel-initialize=pass task-cancel=skip"},
		{"ignore", "cancel=fail/SHOULD late-answer=pass progress-after-cancel=fail/SHOULD silence=info race=skip cancel-finished=pass cancel-unknown=pass cancel-initialize=pass task-cancel=skip"},
		{"lose-race", "cancel=pass late-answer=pass progress-after-cancel=pass silence=info race=fail/SHOULD cancel-finished=pass cancel-unknown=pass cancel-initialize=pass task-cancel=skip"},
		{"answer-cancels", "cancel=pass late-answer=pass progress-after-cancel=pass silence=info race=pass cancel-finished=fail/MUST cancel-unknown=fail/MUST cancel-initialize=fail/MUST task-cancel=skip"},
		{"close-on-cancel", "cancel=fail/MUST"},
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

// Package upstreamtest helps tests drive a Backend of package upstream as
// a session of lines does, without a whole session.
package upstreamtest

import (
	"io"
	"sync"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
)

// Sessioned returns a writer of lines to out, a Backend's Out, that plays
// the part of the session the Backend serves: a request opens a call of
// its own (by id: a test's ids are not reused), and a cancel names its
// request's call, as the core's decisions do; other lines go as they are.
// An out that takes no messages gets the bytes.
func Sessioned(out io.Writer) io.Writer {
	s, ok := out.(stdio.Sender)
	if !ok {
		return out
	}
	return &sessioned{out: s, calls: map[framing.ID]*proxy.Call{}}
}

type sessioned struct {
	out   stdio.Sender
	mu    sync.Mutex
	lines framing.LineSplitter
	calls map[framing.ID]*proxy.Call
}

func (w *sessioned) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lines.Split(p, func(line []byte) bool {
		var f framing.Frame
		if f.Parse(line) != nil || f.Batch {
			w.out.SendFrame(line, nil, nil)
			return true
		}
		m := &f.Msgs[0]
		switch {
		case m.Kind == framing.KindRequest:
			c := new(proxy.Call)
			w.calls[m.ID] = c
			w.out.SendFrame(line, c, m)
		case m.Method == framing.MethodCancelled && w.calls[m.RequestID] != nil:
			w.out.SendCancel(w.calls[m.RequestID], line)
		default:
			w.out.SendFrame(line, nil, m)
		}
		return true
	})
	return len(p), nil
}

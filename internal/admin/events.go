package admin

import (
	"bufio"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// followBuffer is how many events a follower of /events may lag behind
// before the feed drops the next ones for it.
const followBuffer = 1024

// followers serves /events: each follower gets the events feed as JSON
// lines, one event a line, from the moment it connects until it leaves or
// the listener stops.
type followers struct {
	feed *events.Feed  // nil: the mode has no feed
	done chan struct{} // closed when the listener stops: every stream ends
}

func (f *followers) serve(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() {
		ctx.Error("GET /events\n", fasthttp.StatusMethodNotAllowed)
		return
	}
	var sub *events.Subscription
	if f.feed != nil {
		sub = f.feed.Subscribe(followBuffer)
	}
	if sub == nil {
		ctx.Error("the events feed has stopped\n", fasthttp.StatusServiceUnavailable)
		return
	}
	ctx.SetContentType("application/x-ndjson")
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.Response.ImmediateHeaderFlush = true // the follower knows it follows before the first event
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		defer sub.Stop()
		for {
			select {
			case line, ok := <-sub.Lines():
				if !ok {
					return
				}
				w.Write(line)
				if len(sub.Lines()) > 0 {
					continue // more waiting: one flush for them all
				}
				if w.Flush() != nil {
					return // the follower left
				}
			case <-f.done:
				return
			}
		}
	})
}

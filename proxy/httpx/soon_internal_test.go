package httpx

import (
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
	"go.uber.org/zap/zaptest"
)

// TestWatchedCallSetsNoTimer: a 2026-07-28 call whose client's close is
// watched until the upstream's headers come (and a JSON answer) leaves
// nothing in the sidecar's queue of what waits, whose one timer would
// otherwise go off about every headDelay under a steady load, waking the
// process: the watch begins at once instead.
func TestWatchedCallSetsNoTimer(t *testing.T) {
	sc := watchedCall(t, "application/json", `{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`)
	if n := sc.soon.Waiting(); n != 0 {
		t.Errorf("%d functions wait in the sidecar's queue after a watched call, want none", n)
	}
}

// TestEventStreamKeepsItsWatch: the watch of a 2026-07-28 client's close
// begun before the upstream's headers goes on through the event stream's
// relay: one registration per call, not one before the headers and
// another after.
func TestEventStreamKeepsItsWatch(t *testing.T) {
	for _, tt := range []struct{ contentType, body string }{
		{"text/event-stream", "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[]}}\n\n"},
		{"application/json", `{"jsonrpc":"2.0","id":1,"result":{"content":[]}}`},
	} {
		if n := watchedCall(t, tt.contentType, tt.body).closes.Begun(); n != 1 {
			t.Errorf("%s: %d watches begun for one call, want 1", tt.contentType, n)
		}
	}
}

// watchedCall serves a sidecar in front of an upstream answering body as
// contentType, sends it one 2026-07-28 tools/call, checks the answer, and
// returns the sidecar.
func watchedCall(t *testing.T, contentType, body string) *Sidecar {
	up := serveOn(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType(contentType)
		ctx.SetBodyString(body)
	})
	sc := &Sidecar{Upstream: up, UpstreamTransport: TransportStreamable, Logger: zaptest.NewLogger(t)}
	h, err := sc.Handler()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Cleanup("the test ends") })
	if got := postCall(t, serveOn(t, h), "2026-07-28", 1, "echo"); !strings.Contains(got, `"id":1`) {
		t.Fatalf("the call: %s", got)
	}
	return sc
}

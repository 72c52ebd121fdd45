package demux

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// fakeRoute records what a Router does to it.
type fakeRoute struct {
	name    string
	pending int
	got     []string
	ended   bool
	grace   time.Duration // the grace Cancelled started, if any
}

func (r *fakeRoute) Send(line []byte, answer bool) bool {
	r.got = append(r.got, fmt.Sprintf("%s answer=%t", line, answer))
	return true
}
func (r *fakeRoute) Settle() { r.pending-- }
func (r *fakeRoute) Answered() {
	if r.pending <= 0 {
		r.ended = true
	}
}
func (r *fakeRoute) Cancelled(grace time.Duration) {
	if r.pending--; r.pending <= 0 {
		r.grace = grace
	}
}
func (r *fakeRoute) End()        { r.ended = true }
func (r *fakeRoute) Ended() bool { return r.ended }

func newRouter() *Router[*fakeRoute] {
	n := 0
	return &Router[*fakeRoute]{New: func(calls int) *fakeRoute {
		n++
		return &fakeRoute{name: fmt.Sprintf("post%d", n), pending: calls}
	}}
}

// calls has a tracker decide the client's requests, one per id, and
// returns their calls.
func calls(t *testing.T, ids ...int) []*proxy.Call {
	t.Helper()
	tr := proxy.NewTracker(proxy.TrackerOptions{AllowSharedIDs: true})
	var out []*proxy.Call
	for _, id := range ids {
		var f framing.Frame
		if err := f.Parse(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"x"}}`, id)); err != nil {
			t.Fatal(err)
		}
		out = append(out, tr.Decide(proxy.Client, &f.Msgs[0]).Request)
	}
	return out
}

// TestRouterRoutes: what the core says is about a request goes to that
// request's route, and its last message ends it; other traffic goes to
// the newest open route, else to the standalone one, else nowhere.
func TestRouterRoutes(t *testing.T) {
	r := newRouter()
	if d := r.Deliver([]byte("note"), nil, false); d != NoRoute {
		t.Errorf("no stream open: %v, want NoRoute", d)
	}
	get := &fakeRoute{name: "get"}
	r.Listen(get)
	c := calls(t, 1)[0]
	post := r.Open([]*proxy.Call{c})
	r.Deliver([]byte("progress"), c, false)
	r.Deliver([]byte("sampling"), nil, false)
	r.Deliver([]byte("answer"), c, true)
	if len(post.got) != 3 || !strings.Contains(post.got[2], "answer answer=true") || !post.ended {
		t.Errorf("the POST's route got %q (ended %v): want progress, the nested request, the answer, then its end", post.got, post.ended)
	}
	if d := r.Deliver([]byte("late progress"), c, false); d != NoRoute { // decided before its answer went
		t.Errorf("progress about an answered call: %v, want NoRoute", d)
	}
	r.Deliver([]byte("note"), nil, false)
	if len(get.got) != 1 {
		t.Errorf("the standalone stream got %q, want what came after the POST's end", get.got)
	}
	if !r.Streaming() {
		t.Error("the standalone stream is open, yet not streaming")
	}
	get.End()
	if r.Streaming() {
		t.Error("nothing is open, yet streaming")
	}
}

// TestRouterEnd: at the session's end every request still waiting gets
// the proxy's -32000 on its route, under the client's id, and every route
// ends; a route opened later gets the same at once.
func TestRouterEnd(t *testing.T) {
	r := newRouter()
	cs := calls(t, 1, 1)
	first, second := r.Open(cs[:1]), r.Open(cs[1:])
	r.End()
	for _, rt := range []*fakeRoute{first, second} {
		if len(rt.got) != 1 || !strings.Contains(rt.got[0], `"id":1`) || !strings.Contains(rt.got[0], "-32000") || !rt.ended {
			t.Errorf("%s got %q (ended %v), want -32000 under id 1, then its end", rt.name, rt.got, rt.ended)
		}
	}
	late := r.Open(calls(t, 2))
	if len(late.got) != 1 || !strings.Contains(late.got[0], "-32000") || !late.ended {
		t.Errorf("a route opened after the end got %q (ended %v)", late.got, late.ended)
	}
}

// TestRouterCancelAndShare: a cancel leaves the route to its grace; a
// route the client left gives its request up once; the shared router
// sends unrelated traffic nowhere.
func TestRouterCancelAndShare(t *testing.T) {
	r := newRouter()
	cs := calls(t, 1, 2)
	post := r.Open(cs[:1])
	if !r.Abandon(cs[0], post) || r.Abandon(cs[0], post) {
		t.Error("Abandon gave the request up other than once")
	}
	post2 := r.Open(cs[1:])
	r.Cancelled(cs[1], time.Second)
	if post2.grace != time.Second {
		t.Errorf("a cancel left the route %+v, want its grace", post2)
	}
	shared := newRouter()
	shared.Share()
	c := calls(t, 1)[0]
	shared.Open([]*proxy.Call{c})
	if d := shared.Deliver([]byte("note"), nil, false); d != NoRoute {
		t.Errorf("unrelated traffic on the shared router: %v, want NoRoute", d)
	}
	shared.Deliver([]byte("answer"), c, true)
	if d := shared.Deliver([]byte("progress"), c, false); d != NoRoute {
		t.Errorf("traffic about an ended request on the shared router: %v, want NoRoute", d)
	}
}

// TestRouterKeepsStrays: what is about a request the client cancelled,
// decided before the cancel, reaches no other request's stream (a strict
// client closes its connection over progress for a token it does not
// hold); a task's progress after the answer that made the task goes to
// the standalone stream, never to another request's.
func TestRouterKeepsStrays(t *testing.T) {
	r := newRouter()
	get := &fakeRoute{name: "get"}
	r.Listen(get)
	cs := calls(t, 1, 2)
	first, second := r.Open(cs[:1]), r.Open(cs[1:])
	r.Cancelled(cs[0], time.Second)
	if d := r.Deliver([]byte("progress of 1"), cs[0], false); d != NoRoute || len(second.got)+len(first.got)+len(get.got) != 0 {
		t.Errorf("progress of a cancelled call: %v; streams got %q %q %q", d, first.got, second.got, get.got)
	}

	tr := proxy.NewTracker(proxy.TrackerOptions{})
	var f framing.Frame
	f.Parse([]byte(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x","task":{},"_meta":{"progressToken":"p"}}}`))
	task := tr.Decide(proxy.Client, &f.Msgs[0]).Request
	f.Parse([]byte(`{"jsonrpc":"2.0","id":7,"result":{"task":{"taskId":"T","status":"working"}}}`))
	tr.Decide(proxy.Server, &f.Msgs[0])
	r.Open([]*proxy.Call{task})
	r.Deliver([]byte("created"), task, true)
	r.Deliver([]byte("task progress"), task, false)
	if len(get.got) != 1 || len(second.got) != 0 {
		t.Errorf("a task's progress: the standalone stream got %q, another call's %q", get.got, second.got)
	}
}

package demux

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// fakeRoute records what a Router does to it.
type fakeRoute struct {
	name    string
	ids     []framing.ID
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
	return &Router[*fakeRoute]{New: func(ids []framing.ID) *fakeRoute {
		n++
		return &fakeRoute{name: fmt.Sprintf("post%d", n), ids: ids, pending: len(ids)}
	}}
}

func frame(t *testing.T, s string) *framing.Frame {
	t.Helper()
	var f framing.Frame
	if err := f.Parse([]byte(s)); err != nil {
		t.Fatal(err)
	}
	return &f
}

// deliver routes a message of the server's.
func deliver[R Route](t *testing.T, r *Router[R], line string) Delivery {
	t.Helper()
	f := frame(t, line)
	return r.Deliver(&f.Msgs[0], []byte(line))
}

// TestRouterRoutes: an answer goes to its request's route and ends it,
// progress to the route of its token, other traffic to the newest open
// route, else to the standalone one, else nowhere.
func TestRouterRoutes(t *testing.T) {
	r := newRouter()
	if d := deliver(t, r, `{"jsonrpc":"2.0","method":"notifications/message","params":{}}`); d != NoRoute {
		t.Errorf("no stream open: %v, want NoRoute", d)
	}
	get := &fakeRoute{name: "get"}
	r.Listen(get)
	req := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":"p"}}}`
	line, post, ok := r.Admit(frame(t, req), []byte(req))
	if !ok || string(line) != req || !slices.Equal(post.ids, []framing.ID{framing.IntID(1)}) {
		t.Fatalf("admit: %s %+v %v", line, post, ok)
	}
	deliver(t, r, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1}}`)
	deliver(t, r, `{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{}}`)
	deliver(t, r, `{"jsonrpc":"2.0","id":1,"result":{}}`)
	if len(post.got) != 3 || !strings.Contains(post.got[2], "answer=true") || !post.ended {
		t.Errorf("the POST's route got %q (ended %v): want progress, the nested request, the answer, then its end", post.got, post.ended)
	}
	deliver(t, r, `{"jsonrpc":"2.0","method":"notifications/message","params":{}}`)
	if len(get.got) != 1 {
		t.Errorf("the standalone stream got %q, want the notification that came after the POST's end", get.got)
	}
	if !r.Streaming() {
		t.Error("the standalone stream is open, yet not streaming")
	}
	get.End()
	if r.Streaming() {
		t.Error("nothing is open, yet streaming")
	}
}

// TestRouterKeepsSharedIDsApart: a request under an id already in flight
// reaches the server renamed, and its answer comes back under the
// client's id, on its own route; a cancel of the id names both.
func TestRouterKeepsSharedIDsApart(t *testing.T) {
	r := newRouter()
	req := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`
	_, first, _ := r.Admit(frame(t, req), []byte(req))
	line, second, _ := r.Admit(frame(t, req), []byte(req))
	if !strings.Contains(string(line), `"id":"h1"`) || !slices.Equal(second.ids, []framing.ID{framing.StringID("h1")}) {
		t.Fatalf("the second request with id 1 went as %s (route ids %v)", line, second.ids)
	}
	if got := r.RenamedOf(framing.IntID(1)); !slices.Equal(got, []framing.ID{framing.StringID("h1")}) {
		t.Errorf("RenamedOf(1) = %v", got)
	}
	deliver(t, r, `{"jsonrpc":"2.0","id":"h1","result":{"n":2}}`)
	deliver(t, r, `{"jsonrpc":"2.0","id":1,"result":{"n":1}}`)
	if len(second.got) != 1 || !strings.Contains(second.got[0], `"id":1`) || !strings.Contains(second.got[0], `"n":2`) {
		t.Errorf("the renamed request's route got %q, want its answer under id 1", second.got)
	}
	if len(first.got) != 1 || !strings.Contains(first.got[0], `"n":1`) {
		t.Errorf("the first request's route got %q", first.got)
	}
}

// TestRouterEndsSubscriptions: the server's notifications/cancelled of a
// subscriptions/listen request is that request's last message, on its
// route, which it ends.
func TestRouterEndsSubscriptions(t *testing.T) {
	r := newRouter()
	req := `{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","params":{}}`
	_, sub, _ := r.Admit(frame(t, req), []byte(req))
	deliver(t, r, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`)
	if len(sub.got) != 1 || !strings.Contains(sub.got[0], "answer=true") || !sub.ended {
		t.Errorf("the subscription's route got %q (ended %v)", sub.got, sub.ended)
	}
}

// TestRouterEnd: at the session's end every request still waiting gets
// the proxy's -32000 on its route, under the client's id, and every route
// ends; a route opened later gets the same at once.
func TestRouterEnd(t *testing.T) {
	r := newRouter()
	req := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`
	_, first, _ := r.Admit(frame(t, req), []byte(req))
	_, second, _ := r.Admit(frame(t, req), []byte(req)) // renamed h1
	r.End()
	for _, rt := range []*fakeRoute{first, second} {
		if len(rt.got) != 1 || !strings.Contains(rt.got[0], `"id":1`) || !strings.Contains(rt.got[0], "-32000") || !rt.ended {
			t.Errorf("%s got %q (ended %v), want -32000 under id 1, then its end", rt.name, rt.got, rt.ended)
		}
	}
	late := r.Open([]framing.ID{framing.IntID(2)}, nil)
	if len(late.got) != 1 || !strings.Contains(late.got[0], "-32000") || !late.ended {
		t.Errorf("a route opened after the end got %q (ended %v)", late.got, late.ended)
	}
}

// TestRouterCancelAndShare: a cancel leaves the route to its grace, never
// for initialize (which is never cancelled); a route the client left
// gives its request up once; the shared router sends unrelated traffic
// nowhere.
func TestRouterCancelAndShare(t *testing.T) {
	r := newRouter()
	init := `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}`
	r.Admit(frame(t, init), []byte(init))
	if !r.IsInitialize(framing.IntID(0)) || r.IsInitialize(framing.IntID(1)) {
		t.Error("IsInitialize is wrong")
	}
	req := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}`
	_, post, _ := r.Admit(frame(t, req), []byte(req))
	if !r.Abandon(framing.IntID(1), post) || r.Abandon(framing.IntID(1), post) {
		t.Error("Abandon gave the request up other than once")
	}
	_, post2, _ := r.Admit(frame(t, req), []byte(req))
	r.Cancelled(framing.IntID(1), time.Second)
	if post2.grace != time.Second {
		t.Errorf("a cancel left the route %+v, want its grace", post2)
	}
	shared := newRouter()
	shared.Share()
	line, id, _ := shared.Rename(&frame(t, req).Msgs[0])
	shared.Open([]framing.ID{id}, nil)
	if !strings.Contains(string(line), `"id":"h1"`) {
		t.Errorf("the shared router sent %s", line)
	}
	if d := deliver(t, shared, `{"jsonrpc":"2.0","method":"notifications/message","params":{}}`); d != NoRoute {
		t.Errorf("unrelated traffic on the shared router: %v, want NoRoute", d)
	}
	shared.Forget(id, framing.ID{})
	if d := deliver(t, shared, `{"jsonrpc":"2.0","id":"h1","result":{}}`); d != NoRoute {
		t.Errorf("an answer after Forget: %v, want NoRoute", d)
	}
}

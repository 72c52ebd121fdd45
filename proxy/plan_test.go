package proxy

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// decideFrame parses frame and has s decide it as a client's, holding
// with hold.
func decideFrame(t *testing.T, s *Session, frame string, hold func(*Call) any) Plan {
	t.Helper()
	var f framing.Frame
	if err := f.Parse([]byte(frame)); err != nil {
		t.Fatal(err)
	}
	s.Lock()
	defer s.Unlock()
	return s.DecideFrame(Client, &f, TraceContext{}, hold)
}

// TestDecideFrame: a frame's plan, the one fold of every message's
// outcome that both the stdio relay (batches) and the HTTP relay carry
// out: an unchanged frame passes as its own bytes; a batch loses what is
// not forwarded (an invalid element, answered by the proxy; a cancel of a
// request held in the same batch, which withdraws the request; a cancel naming no
// request, kept as a stray for the fleet); and a request the governor
// holds is held before the next element is decided.
func TestDecideFrame(t *testing.T) {
	s, _, rec := sessionWith("3")
	one := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow"}}`
	p := decideFrame(t, s, one, nil)
	if !p.Same || string(p.Data) != one || len(p.Requests) != 1 || !p.Timed || p.Batch {
		t.Fatalf("one request: %+v", p)
	}
	held := 0
	hold := func(c *Call) any { held++; return fmt.Sprintf("hold%s", c.ID()) }
	batch := `[{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow"}},` +
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"slow"}},` +
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}},` +
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99}},` +
		`{"jsonrpc":"2.0","id":4}]`
	p = decideFrame(t, s, batch, hold)
	if p.Same || !p.Batch {
		t.Fatalf("the batch passed unchanged: %+v", p)
	}
	// The held request stays in the frame: its transport takes it out once
	// the hold ends withdrawn (Rebuild).
	two := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"slow"}}`
	if want := `[` + two + `,{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"slow"}}]`; string(p.Data) != want {
		t.Errorf("forwarded %s\nwant      %s", p.Data, want)
	}
	if held != 1 || len(p.Held) != 1 || p.Held[0].Handle != "hold3" || p.Withdrawn != 1 {
		t.Errorf("held %d (%+v), withdrawn %d; want request 3 held, then withdrawn by its cancel", held, p.Held, p.Withdrawn)
	}
	if got := strings.Join(rec.did, "\n"); got != "withdrawn 3 hold3 reply=false" {
		t.Errorf("the carrier did:\n%s", got)
	}
	// The element that is no message (id 4, neither method nor result) is
	// valid JSON: Invalid Request, as JSON-RPC answers a batch's [1].
	if len(p.Replies) != 1 || !strings.Contains(string(p.Replies[0]), `"code":-32600`) {
		t.Errorf("replies %q, want one -32600 Invalid Request", p.Replies)
	}
	if len(p.Strays) != 1 || !strings.Contains(string(p.Strays[0]), `"requestId":99`) {
		t.Errorf("strays %q, want the cancel of 99", p.Strays)
	}
	if len(p.Requests) != 2 || len(p.Cancels) != 0 {
		t.Errorf("requests %d, cancels %d; want 2 (2 and the held 3), 0", len(p.Requests), len(p.Cancels))
	}
	if got := p.Rebuild(map[*Call]bool{p.Held[0].Call: true}); string(got) != `[`+two+`]` || len(p.Requests) != 1 {
		t.Errorf("rebuilt without the withdrawn request: %s, %d requests left; want request 2 alone", got, len(p.Requests))
	}
	if got := p.Rebuild(map[*Call]bool{p.Requests[0]: true, p.Held[0].Call: true}); got != nil || len(p.Requests) != 0 {
		t.Errorf("rebuilt without any request: %s, %d left", got, len(p.Requests))
	}
	// A single message has no list of what is kept: Rebuild finds it in
	// Data, and drops it with its request.
	five := `{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"slow"}}`
	s5, _, _ := sessionWith("5")
	p = decideFrame(t, s5, five, hold)
	if len(p.Held) != 1 || len(p.Kept) != 0 || string(p.Data) != five {
		t.Fatalf("one held request: %+v", p)
	}
	if got := p.Rebuild(map[*Call]bool{}); string(got) != five || len(p.Requests) != 1 {
		t.Errorf("rebuilt with nothing withdrawn: %s, %d requests; want the request", got, len(p.Requests))
	}
	if got := p.Rebuild(map[*Call]bool{p.Held[0].Call: true}); got != nil || len(p.Requests) != 0 {
		t.Errorf("rebuilt without the withdrawn request: %s, %d requests; want nothing", got, len(p.Requests))
	}
	p = decideFrame(t, s, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`, nil)
	if len(p.Cancels) != 1 || p.Cancels[0].ID().String() != "1" || !p.Same {
		t.Errorf("a cancel of request 1: %+v", p)
	}
}

// TestJoinFrame: a single message stays itself, a batch is rebuilt
// around what is left, nothing left is nil.
func TestJoinFrame(t *testing.T) {
	if got := JoinFrame(nil, true); got != nil {
		t.Errorf("nothing: %q", got)
	}
	if got := string(JoinFrame([][]byte{[]byte(`{"a":1}`)}, false)); got != `{"a":1}` {
		t.Errorf("one message: %s", got)
	}
	if got := string(JoinFrame([][]byte{[]byte(`{"a":1}`), []byte(`{"b":2}`)}, true)); got != `[{"a":1},{"b":2}]` {
		t.Errorf("a batch: %s", got)
	}
}

// TestIsServerGone: the proxy's own -32000, which a transport gives a
// request whose stream broke, is told apart from a server's answers,
// its own -32000 among them.
func TestIsServerGone(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want bool
	}{
		{string(ErrorReply(framing.ID{}, CodeServerGone, "the upstream's stream broke")), true},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"x"}}`, false},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"x","data":{"proxy":"someone else"}}}`, false},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"x","data":{"proxy":"mcp-cancel-proxy"}}}`, false},
		{`{"jsonrpc":"2.0","id":1,"result":{"error":{"code":-32000,"data":{"proxy":"mcp-cancel-proxy"}}}}`, false},
	} {
		var f framing.Frame
		if err := f.Parse([]byte(tc.raw)); err != nil {
			t.Fatal(err)
		}
		if got := IsServerGone(&f.Msgs[0]); got != tc.want {
			t.Errorf("IsServerGone(%s) = %v, want %v", tc.raw, got, tc.want)
		}
	}
	if IsServerGone(nil) {
		t.Error("IsServerGone(nil)")
	}
}

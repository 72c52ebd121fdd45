package policy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
)

// TestReissueKey: two calls are the same when their tool and arguments
// are, whatever the order of keys; numbers keep their digits; a
// reissue_key names what counts instead, and a call without it has no key.
func TestReissueKey(t *testing.T) {
	all := &Effective{Reissue: true}
	byOrder := &Effective{Reissue: true, ReissueKey: pointer{"arguments", "order"}}
	key := func(rule *Effective, tool, params string) string {
		t.Helper()
		var f framing.Frame
		if err := f.Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":` + params + `}`)); err != nil {
			t.Fatal(err)
		}
		k, ok := reissueKey(rule, tool, "", &f.Msgs[0])
		if !ok {
			return "none"
		}
		return k
	}
	a := key(all, "pay", `{"name":"pay","arguments":{"amount":5,"to":"x"}}`)
	for _, c := range []struct {
		what  string
		k     string
		equal bool
	}{
		{"keys in another order", key(all, "pay", `{"name":"pay","arguments":{"to":"x","amount":5},"_meta":{"progressToken":"b"}}`), true},
		{"another amount", key(all, "pay", `{"name":"pay","arguments":{"amount":6,"to":"x"}}`), false},
		{"another tool", key(all, "refund", `{"name":"refund","arguments":{"amount":5,"to":"x"}}`), false},
	} {
		if (c.k == a) != c.equal {
			t.Errorf("%s: same key %v, want %v", c.what, c.k == a, c.equal)
		}
	}
	if key(all, "pay", `{"name":"pay","arguments":{"amount":9007199254740993}}`) == key(all, "pay", `{"name":"pay","arguments":{"amount":9007199254740992}}`) {
		t.Error("numbers that differ past 2^53 got one key")
	}
	// The way a number is written does not count (issue 40, item 8): 1,
	// 1.0, 1e0, 10e-1 and 0.1e1 are one number, -0 is 0; and a lone
	// surrogate ("\ud800", decoded as "\ufffd" is) makes no key at all.
	one := key(all, "pay", `{"name":"pay","arguments":{"amount":1,"fee":0}}`)
	for _, written := range []string{`1.0,"fee":-0`, `1e0,"fee":0.0`, `10e-1,"fee":0e5`, `0.1e1,"fee":-0.0`, `1E+0,"fee":0`} {
		if k := key(all, "pay", `{"name":"pay","arguments":{"amount":`+written+`}}`); k != one {
			t.Errorf("amount %s: another key than 1 and 0's", written)
		}
	}
	if key(all, "pay", `{"name":"pay","arguments":{"amount":1.5}}`) != key(all, "pay", `{"name":"pay","arguments":{"amount":15e-1}}`) {
		t.Error("1.5 and 15e-1 got two keys")
	}
	if key(all, "pay", `{"name":"pay","arguments":{"amount":1.5}}`) == key(all, "pay", `{"name":"pay","arguments":{"amount":1.05}}`) {
		t.Error("1.5 and 1.05 got one key")
	}
	if k := key(all, "pay", `{"name":"pay","arguments":{"to":"\ud800"}}`); k != "none" {
		t.Errorf("a lone surrogate got key %s, want none (it would join \ufffd's calls)", k)
	}
	if key(all, "pay", `{"name":"pay","arguments":{"to":"\ud83d\ude00"}}`) == "none" {
		t.Error("a surrogate pair (an emoji) got no key")
	}
	o1 := key(byOrder, "pay", `{"name":"pay","arguments":{"order":"o-1","nonce":"n1"}}`)
	o2 := key(byOrder, "pay", `{"name":"pay","arguments":{"nonce":"n2","order":"o-1"}}`)
	if o1 != o2 || o1 == "none" {
		t.Errorf("reissue_key /arguments/order: keys %s and %s, want one (the nonce does not count)", o1, o2)
	}
	if k := key(byOrder, "pay", `{"name":"pay","arguments":{"nonce":"n2"}}`); k != "none" {
		t.Errorf("a call without the reissue_key's value got key %s, want none (it is never joined)", k)
	}
}

// TestReissueValidate: reissue takes join only, on a tool rule; its other
// settings need it, and their durations are positive.
func TestReissueValidate(t *testing.T) {
	neg := -time.Second
	for _, c := range []struct {
		rule Rule
		want string
	}{
		{Rule{Tool: "pay", Reissue: "again"}, "is not join"},
		{Rule{Method: "tools/call", Reissue: "join"}, "for tools/call rules"},
		{Rule{Tool: "pay", ReissueKey: "/arguments/id"}, "need reissue: join"},
		{Rule{Tool: "pay", Reissue: "join", ReissueGrace: &neg}, "reissue_grace: must be positive"},
		{Rule{Tool: "pay", Reissue: "join", ReissueKey: "arguments/id"}, "must start with /"},
	} {
		p := Defaults()
		p.Rules = []Rule{c.rule}
		if err := p.Validate("policy"); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.rule, err, c.want)
		}
	}
	p := Defaults()
	p.Defaults.Reissue = "join"
	if err := p.Validate("policy"); err == nil || !strings.Contains(err.Error(), "belong to a rule") {
		t.Errorf("reissue in the defaults: %v", err)
	}
	p = Defaults()
	p.Rules = []Rule{{Tool: "pay", Reissue: "join", ReissueKey: "/arguments/id"}}
	if err := p.Validate("policy"); err != nil {
		t.Error(err)
	}
}

// pay is a call of the tool pay with fixed arguments: each id's a re-issue
// of the others.
func pay(id int) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"pay","arguments":{"amount":5}}}`, id)
}

// TestReissueWaiterLeaves: the cancel of a shared call waits while a
// re-issue waits on it; once that re-issue is cancelled too, nobody waits,
// and the cancel goes reissue_grace later (the proxy's fake clock).
func TestReissueWaiterLeaves(t *testing.T) {
	watchdog(t, 30*time.Second)
	grace := 10 * time.Second
	p := Defaults()
	p.Rules = []Rule{{Tool: "pay", Reissue: "join", ReissueGrace: &grace}}
	e, clk, _ := engine(t, p)
	ft := newTransport(t, e)
	first := ft.client(pay(1)).Request
	ft.client(cancel(1))
	if o := ft.client(pay(2)); !o.Hold {
		t.Fatal("the re-issue was not held")
	}
	clk.Advance(grace)
	ft.none() // a re-issue waits on the call: its cancel stays
	ft.client(cancel(2))
	clk.Advance(grace - time.Millisecond)
	ft.none()
	clk.Advance(time.Millisecond)
	if a := ft.next(); a.kind != "send-cancel" || a.call != first {
		t.Errorf("after the grace: %s of %v, want the first call's cancel sent", a.kind, a.call)
	}
}

// TestReissueOfAFailedCall: a shared call that ends without the server's
// answer (its upstream failed) leaves its re-issue to be sent for real.
func TestReissueOfAFailedCall(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "pay", Reissue: "join"}}
	e, _, _ := engine(t, p)
	ft := newTransport(t, e)
	first := ft.client(pay(1)).Request
	again := ft.client(pay(2)).Request
	ft.mu.Lock()
	ft.tr.Fail(first, -32000, "the upstream could not be reached")
	ft.mu.Unlock()
	if a := ft.next(); a.kind != "dispatch" || a.call != again {
		t.Errorf("%s of %v, want the re-issue dispatched", a.kind, a.call)
	}
}

// TestReissueAnswered: a re-issue of a call that its client still waits
// for gets the same answer, under its own id, and an audit line that
// names the call it joined; a call after that answer is a new one.
func TestReissueAnswered(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "pay", Reissue: "join"}}
	e, _, recs := engine(t, p)
	ft := newTransport(t, e)
	ft.client(pay(1))
	again := ft.client(pay(2)).Request
	ft.server(result(1, `{"content":[{"type":"text","text":"paid"}]}`))
	a := ft.next()
	if a.kind != "answer" || a.call != again || string(a.reply) != `{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"paid"}]}}` {
		t.Errorf("%s of %v: %s, want the answer for id 2", a.kind, a.call, a.reply)
	}
	r := waitRecord(t, recs)
	if string(r.ID) != "2" || string(r.JoinedID) != "1" || r.Status != StatusJoined+" (request 1)" || r.Dispatched {
		t.Errorf("audit: id %s joined %s, status %q, dispatched %v", r.ID, r.JoinedID, r.Status, r.Dispatched)
	}
	if o := ft.client(pay(3)); o.Hold {
		t.Error("a call after the shared call's answer was held: it is a new call")
	}
}

// TestReissueDeadline: the proxy's own cancel of a shared call (its
// deadline) goes at once, and the re-issue waiting on it is sent for real.
func TestReissueDeadline(t *testing.T) {
	watchdog(t, 30*time.Second)
	timeout := time.Second
	p := Defaults()
	p.Rules = []Rule{{Tool: "pay", Reissue: "join", Timeout: &timeout}}
	e, clk, _ := engine(t, p)
	ft := newTransport(t, e)
	first := ft.client(pay(1)).Request
	again := ft.client(pay(2)).Request
	clk.Advance(timeout)
	if a := ft.next(); a.kind != "expire" || a.call != first {
		t.Fatalf("%s of %v, want the first call expired", a.kind, a.call)
	}
	if a := ft.next(); a.kind != "dispatch" || a.call != again {
		t.Errorf("%s of %v, want the re-issue dispatched", a.kind, a.call)
	}
}

// FuzzReissueKey: any params give a key or none, never a panic, and the
// same params the same key.
func FuzzReissueKey(f *testing.F) {
	f.Add(`{"name":"pay","arguments":{"amount":5}}`)
	f.Add(`{"name":"pay","arguments":[1,{"a":null}]}`)
	f.Add(`{"name":"pay"}`)
	rules := []*Effective{{Reissue: true}, {Reissue: true, ReissueKey: pointer{"arguments", "0"}}}
	f.Fuzz(func(t *testing.T, params string) {
		var fr framing.Frame
		if fr.Parse([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":`+params+`}`)) != nil || fr.Batch {
			return
		}
		for _, r := range rules {
			k1, ok1 := reissueKey(r, "pay", "", &fr.Msgs[0])
			k2, ok2 := reissueKey(r, "pay", "", &fr.Msgs[0])
			if k1 != k2 || ok1 != ok2 {
				t.Fatalf("two keys for one call: %q %v, %q %v", k1, ok1, k2, ok2)
			}
		}
	})
}

// sessionless is a transport whose session is several clients' (a
// request without a session): each of its requests is who's.
func sessionless(t *testing.T, e *Engine, who string) *fakeTransport {
	return transportOf(t, e, "r-"+who, func(*proxy.Call) string { return who })
}

// TestReissueAcrossSessionlessRequests: requests without a session each
// have a governor of their own; a re-issue joins a call of another such
// request of the same credential, never one of another credential, and a
// request without a credential joins nothing. The close of the call's
// stream (protocol 2026-07-28's cancel) is held as a client's cancel is;
// the suppressed answer answers the re-issue, and one within the window.
func TestReissueAcrossSessionlessRequests(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "pay", Reissue: "join"}}
	e, _, recs := engine(t, p)
	alice, again, later := sessionless(t, e, "alice"), sessionless(t, e, "alice"), sessionless(t, e, "alice")
	bob, anon, anon2 := sessionless(t, e, "bob"), sessionless(t, e, ""), sessionless(t, e, "")
	first := alice.client(pay(1)).Request
	if anon.client(pay(1)).Hold || anon2.client(pay(1)).Hold {
		t.Error("a request without a credential was held: it joined a call")
	}
	if bob.client(pay(1)).Hold {
		t.Error("another credential's request joined alice's call")
	}
	if !again.client(pay(7)).Hold {
		t.Fatal("alice's re-issue on a request of its own did not join her call")
	}
	alice.mu.Lock()
	alice.tr.CancelCall(first, proxy.SourceDisconnect, "client closed the stream")
	alice.mu.Unlock()
	alice.none() // a re-issue waits on the call: its cancel is held
	alice.server(result(1, `{"content":[]}`))
	if a := again.next(); a.kind != "answer" || string(a.reply) != `{"jsonrpc":"2.0","id":7,"result":{"content":[]}}` {
		t.Errorf("the re-issue: %s %s, want the call's answer under id 7", a.kind, a.reply)
	}
	if a := alice.next(); a.kind != "forget-cancel" || a.call != first {
		t.Errorf("the call: %s, want its held cancel forgotten (answered)", a.kind)
	}
	r := waitRecord(t, recs)
	if string(r.ID) == "1" { // the cancelled call's own
		r = waitRecord(t, recs)
	}
	if string(r.ID) != "7" || string(r.JoinedID) != "1" {
		t.Errorf("audit: id %s joined %s, want 7 joined 1", r.ID, r.JoinedID)
	}
	if !later.client(pay(9)).Hold {
		t.Fatal("a re-issue within the window of the suppressed answer was not held")
	}
	if a := later.next(); a.kind != "answer" || !strings.Contains(string(a.reply), `"id":9`) {
		t.Errorf("the later re-issue: %s %s, want the kept answer under id 9", a.kind, a.reply)
	}
	bob.none()
}

// TestReissueSessionlessCallEnds: when the session of a shared call ends
// (its request's governor closes) with a re-issue of another request
// waiting on it, the re-issue is sent for real.
func TestReissueSessionlessCallEnds(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "pay", Reissue: "join"}}
	e, _, _ := engine(t, p)
	alice, again := sessionless(t, e, "alice"), sessionless(t, e, "alice")
	alice.client(pay(1))
	w := again.client(pay(2))
	if !w.Hold {
		t.Fatal("the re-issue was not held")
	}
	alice.gov.Close()
	if a := again.next(); a.kind != "dispatch" || a.call != w.Request {
		t.Errorf("%s of %v, want the re-issue dispatched", a.kind, a.call)
	}
}

// TestReissueSessionlessCorrelated: without a session, a rule's correlated
// ids scope a re-issue too: the same credential and arguments of another
// run (its correlated run id) are a call of their own.
func TestReissueSessionlessCorrelated(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "pay", Reissue: "join", ReissueKey: "/arguments/order",
		Correlate: map[string]Pointers{"run": {"/_meta/runId"}}}}
	e, _, _ := engine(t, p)
	call := func(id int, run string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"pay","arguments":{"order":"o1"},"_meta":{"runId":%q}}}`, id, run)
	}
	sessionless(t, e, "alice").client(call(1, "r1"))
	if sessionless(t, e, "alice").client(call(2, "r2")).Hold {
		t.Error("a call of another run joined the call")
	}
	if !sessionless(t, e, "alice").client(call(3, "r1")).Hold {
		t.Error("a re-issue of the same run did not join the call")
	}
}

// payFor is a call of pay under id for an amount.
func payFor(id, amount int) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"pay","arguments":{"amount":%d}}}`, id, amount)
}

// reissueEngine is engine with the bounds on kept answers o sets.
func reissueEngine(t *testing.T, o Options) *Engine {
	t.Helper()
	o.Policy = Defaults()
	o.Policy.Rules = []Rule{{Tool: "pay", Reissue: "join"}}
	o.Audit, o.Logger, o.Clock = Audit{Path: "off"}, zaptest.NewLogger(t), clock.NewFake(time.Now())
	e, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Shutdown)
	return e
}

// keepAnswer makes ft's call of amount, cancels it, and has the server
// answer it late with body: the answer is suppressed, and kept.
func keepAnswer(t *testing.T, ft *fakeTransport, id, amount int, body string) {
	t.Helper()
	ft.client(payFor(id, amount))
	ft.client(cancel(id))
	ft.server(result(id, `{"content":[{"type":"text","text":"`+body+`"}]}`))
	if a := ft.next(); a.kind != "forget-cancel" {
		t.Fatalf("after the late answer: %s, want its held cancel forgotten", a.kind)
	}
}

// TestReissueKeptAnswersBounded: the suppressed answers kept for re-issues
// are bounded in entries and in bytes across the process, the oldest
// dropped first: a re-issue of a dropped call runs anew, one of a kept
// call gets its answer. 200 cancelled 8 MiB answers held 2.1 GB before
// (issue 40, item 3).
func TestReissueKeptAnswersBounded(t *testing.T) {
	for name, o := range map[string]Options{
		"entries": {ReissueAnswers: 2},
		"bytes":   {ReissueMemory: 200}, // each answer about 90 bytes
	} {
		t.Run(name, func(t *testing.T) {
			watchdog(t, 30*time.Second)
			e := reissueEngine(t, o)
			ft := newTransport(t, e)
			for i := 1; i <= 3; i++ {
				keepAnswer(t, ft, i, i, "paid")
			}
			if e.kept.order.Len() != 2 {
				t.Errorf("%d answers kept, want 2", e.kept.order.Len())
			}
			if ft.client(payFor(10, 1)).Hold {
				t.Error("a re-issue of the oldest call, dropped, joined it")
			}
			if !ft.client(payFor(11, 3)).Hold {
				t.Fatal("a re-issue of a kept call did not join it")
			}
			if a := ft.next(); a.kind != "answer" || !strings.Contains(string(a.reply), `"id":11`) {
				t.Errorf("%s %s, want the kept answer under id 11", a.kind, a.reply)
			}
		})
	}
}

// TestReissueKeptAnswersEndWithTheSession: a session's kept answers are
// dropped when it ends (calls of two sessions are never joined); those of
// requests without a session, kept in the Engine's table for the re-issues
// of the same credential, stay to the end of their window.
func TestReissueKeptAnswersEndWithTheSession(t *testing.T) {
	watchdog(t, 30*time.Second)
	e := reissueEngine(t, Options{})
	ft := newTransport(t, e)
	keepAnswer(t, ft, 1, 1, "paid")
	alice := sessionless(t, e, "alice")
	keepAnswer(t, alice, 2, 2, "paid")
	if n := e.kept.order.Len(); n != 2 {
		t.Fatalf("%d answers kept, want 2", n)
	}
	ft.gov.Close()
	alice.gov.Close()
	if n, b := e.kept.order.Len(), e.kept.bytes; n != 1 || b == 0 {
		t.Errorf("after the sessions ended: %d answers, %d bytes kept; want the sessionless one alone", n, b)
	}
	if !sessionless(t, e, "alice").client(payFor(3, 2)).Hold {
		t.Error("a sessionless re-issue of the same credential did not get the kept answer")
	}
}

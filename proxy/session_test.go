package proxy

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// recordingCarrier notes what a Session has its transport do, in order.
type recordingCarrier struct{ did []string }

func (r *recordingCarrier) Dispatch(c *Call, held any) {
	r.did = append(r.did, fmt.Sprintf("dispatch %s %v", c.ID(), held))
}

func (r *recordingCarrier) Withdrawn(c *Call, held any, reply []byte) {
	r.did = append(r.did, fmt.Sprintf("withdrawn %s %v reply=%t", c.ID(), held, reply != nil))
}

func (r *recordingCarrier) Cancel(c *Call, notice, reply []byte) {
	r.did = append(r.did, fmt.Sprintf("cancel %s notice=%t reply=%t", c.ID(), strings.Contains(string(notice), MethodCancelledForTest), reply != nil))
}

func (r *recordingCarrier) Notify(c *Call, _ any, frame []byte) {
	r.did = append(r.did, "notify "+string(frame))
}
func (r *recordingCarrier) SendOwn(_ *Call, frame []byte) {
	r.did = append(r.did, "own "+string(frame))
}

func (r *recordingCarrier) CancelOwn(_ *Call, notice []byte) {
	r.did = append(r.did, "cancel own "+string(notice))
}

// MethodCancelledForTest is what a cancel notice names.
const MethodCancelledForTest = framing.MethodCancelled

// holdingGovernor holds the requests whose id is in hold, and keeps the
// Actions it was given.
type holdingGovernor struct {
	act  Actions
	hold map[string]bool
}

func (g *holdingGovernor) Admit(c *Call, _ *framing.Message) Admission {
	return Admission{Hold: g.hold[c.ID().String()], Timed: true}
}
func (g *holdingGovernor) Observe(Change) {}
func (g *holdingGovernor) Close()         {}

// sessionWith returns a Session over a recording carrier whose governor
// holds the requests with the ids named.
func sessionWith(held ...string) (*Session, *holdingGovernor, *recordingCarrier) {
	rec := &recordingCarrier{}
	g := &holdingGovernor{hold: map[string]bool{}}
	for _, id := range held {
		g.hold[id] = true
	}
	s := NewSession(SessionOptions{Carrier: rec, Governor: func(a Actions) Governor { g.act = a; return g },
		Restart: func(string) bool { return true }})
	return s, g, rec
}

// request has the session decide a client's tools/call with id, holding
// it if the outcome says so, as a transport does.
func request(t *testing.T, s *Session, id int) *Call {
	t.Helper()
	var f framing.Frame
	if err := f.Parse(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"slow"}}`, id)); err != nil {
		t.Fatal(err)
	}
	s.Lock()
	defer s.Unlock()
	o := s.Decide(Client, &f.Msgs[0], TraceContext{})
	if o.Request == nil {
		t.Fatalf("request %d: no call in %+v", id, o)
	}
	if o.Hold {
		s.Hold(o.Request, fmt.Sprintf("frame%d", id))
	}
	return o.Request
}

// TestSessionCarriesOutItsActions: every Action a governor takes is
// decided in the Session and carried out by its Carrier, held requests
// being the Session's: a held request is dispatched once, withdrawn (never
// cancelled on the server) when it expires or the session ends, and an
// unheld one is cancelled on the server.
func TestSessionCarriesOutItsActions(t *testing.T) {
	s, g, rec := sessionWith("2", "3", "4")
	c1, c2, c3, c4 := request(t, s, 1), request(t, s, 2), request(t, s, 3), request(t, s, 4)

	g.act.Dispatch(c2)
	g.act.Dispatch(c2) // already sent: nothing
	g.act.Expire(c3, SourceDeadline, "deadline of 1s passed", DeadlineReply(c3.ID(), "1s"))
	g.act.Expire(c3, SourceDeadline, "again", nil) // no longer in flight: nothing
	g.act.Expire(c1, SourceDeadline, "deadline of 1s passed", DeadlineReply(c1.ID(), "1s"))
	g.act.SendOwn(framing.MethodTasksCancel, []byte(`{"taskId":"t"}`), framing.ID{}, func(*framing.Message) {})
	if !g.act.Restart("why") {
		t.Error("Restart did not reach the session's restart")
	}
	ran := false
	g.act.After(func() { ran = !s.mu.TryLock() }) // under the session's lock
	if !ran {
		t.Error("After's f ran without the session's lock")
	}
	if n := s.CancelAll(SourceShutdown, "stopping", func(id framing.ID) []byte { return ErrorReply(id, CodeServerGone, "stopping") }); n != 2 {
		t.Errorf("CancelAll cancelled %d, want 2 (the dispatched request and the held one)", n)
	}
	if s.Cancel(c4, SourceDisconnect, "gone", nil) {
		t.Error("Cancel of a request CancelAll ended reported it in flight")
	}

	want := []string{
		"dispatch 2 frame2",
		"withdrawn 3 frame3 reply=true",
		"cancel 1 notice=true reply=true",
		`own {"jsonrpc":"2.0","id":"mcp-cancel-proxy-r1","method":"tasks/cancel","params":{"taskId":"t"}}`,
		"cancel 2 notice=true reply=true", // CancelAll's two, in no particular order
		"withdrawn 4 frame4 reply=true",
	}
	slices.Sort(rec.did[4:])
	if got := strings.Join(rec.did, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("the carrier did:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	if held, ok := s.WithdrawHeld(c4); ok {
		t.Errorf("c4 still held (%v) after CancelAll", held)
	}
}

// TestSessionCancelOnTheClientsBehalf: a departed client's request is
// cancelled on the server once; a held one is withdrawn instead.
func TestSessionCancelOnTheClientsBehalf(t *testing.T) {
	s, _, rec := sessionWith("2")
	c1, c2 := request(t, s, 1), request(t, s, 2)
	if !s.Cancel(c1, SourceDisconnect, "client disconnected", nil) || s.Cancel(c1, SourceDisconnect, "again", nil) {
		t.Error("Cancel did not report c1 in flight once")
	}
	if !s.Cancel(c2, SourceDisconnect, "client closed the stream", nil) {
		t.Error("Cancel did not report the held c2 in flight")
	}
	want := "cancel 1 notice=true reply=false\nwithdrawn 2 frame2 reply=false"
	if got := strings.Join(rec.did, "\n"); got != want {
		t.Errorf("the carrier did:\n%s\nwant:\n%s", got, want)
	}
	if in, _ := s.Tracker().InFlight(); in != 0 {
		t.Errorf("%d requests still in flight", in)
	}
}

// TestProxyCancelsAreTheProxys: a cancel the proxy makes on the client's
// behalf (a deadline, a departed client) is an event from the proxy, as its
// log line says; the client's own is the client's.
func TestProxyCancelsAreTheProxys(t *testing.T) {
	var from []string
	rec := &recordingCarrier{}
	s := NewSession(SessionOptions{Carrier: rec, Tracker: TrackerOptions{OnEvent: func(ev Event) {
		if ev.Action == ActCancelAccepted {
			from = append(from, ev.From)
		}
	}}})
	c1, _ := request(t, s, 1), request(t, s, 2)
	s.Expire(c1, SourceDeadline, "deadline of 1s passed", nil)
	var f framing.Frame
	if err := f.Parse([]byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`)); err != nil {
		t.Fatal(err)
	}
	s.Lock()
	s.Decide(Client, &f.Msgs[0], TraceContext{})
	s.Unlock()
	if got := strings.Join(from, " "); got != "proxy client" {
		t.Errorf("cancels accepted from %q, want the deadline's from the proxy, then the client's", got)
	}
}

// TestSessionWithdrawsOnTheClientsCancel: a client's cancel of a held
// request is decided in the Session: the request is withdrawn (the carrier
// is told), the cancel dropped; a cancel of one that is not held passes.
func TestSessionWithdrawsOnTheClientsCancel(t *testing.T) {
	s, _, rec := sessionWith("2")
	request(t, s, 1)
	request(t, s, 2)
	decide := func(id int) Outcome {
		var f framing.Frame
		if err := f.Parse(fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d}}`, id)); err != nil {
			t.Fatal(err)
		}
		s.Lock()
		defer s.Unlock()
		return s.Decide(Client, &f.Msgs[0], TraceContext{})
	}
	if o := decide(2); !o.Withdrawn || o.Verdict != Drop {
		t.Errorf("cancel of the held request: %+v, want it withdrawn and the cancel dropped", o)
	}
	if o := decide(1); o.Withdrawn || o.Verdict != Forward || o.Cancelled == nil {
		t.Errorf("cancel of the running request: %+v, want it forwarded", o)
	}
	if got := strings.Join(rec.did, "\n"); got != "withdrawn 2 frame2 reply=false" {
		t.Errorf("the carrier did:\n%s", got)
	}
	if st := s.Tracker().Stats(); st.Withdrawn != 1 {
		t.Errorf("withdrawn = %d, want 1", st.Withdrawn)
	}
}

// decideIn has the session decide one message from a peer, as a transport
// does.
func decideIn(t *testing.T, s *Session, from Peer, msg string) Outcome {
	t.Helper()
	var f framing.Frame
	if err := f.Parse([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	s.Lock()
	defer s.Unlock()
	return s.Decide(from, &f.Msgs[0], TraceContext{})
}

// TestSpentAndRenew: a session is Spent only while nothing is in flight,
// held or kept back and nothing but messages passed on was counted (a
// cancel's, a withdrawal's work may still come); Renew makes it new: no
// call, count, hold or governor of before.
func TestSpentAndRenew(t *testing.T) {
	s, g, _ := sessionWith("2")
	if !s.Spent() {
		t.Fatal("a new session is not Spent")
	}
	request(t, s, 1)
	if s.Spent() {
		t.Fatal("Spent with a request in flight")
	}
	decideIn(t, s, Server, `{"jsonrpc":"2.0","id":1,"result":{}}`)
	if !s.Spent() {
		t.Fatalf("not Spent once its one request is answered: %+v", s.Tracker().Stats())
	}
	request(t, s, 2) // held
	decideIn(t, s, Client, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`)
	if s.Spent() {
		t.Fatal("Spent after a held request was withdrawn")
	}

	g2 := &holdingGovernor{hold: map[string]bool{}}
	rec2 := &recordingCarrier{}
	s.Renew(SessionOptions{Carrier: rec2, Governor: func(a Actions) Governor { g2.act = a; return g2 }})
	if !s.Spent() || s.Tracker().Stats() != (Stats{}) || s.Governor() != g2 || g2.act != s || g.act != s {
		t.Fatalf("renewed: Spent %t, stats %+v, governor %p (want %p)", s.Spent(), s.Tracker().Stats(), s.Governor(), g2)
	}
	if s.Restart("why") {
		t.Fatal("the renewed session kept the Restart of before")
	}
	c := request(t, s, 2) // the id of a withdrawn call of before: a new call now
	if c.ID().String() != "2" || len(s.held) != 0 {
		t.Fatalf("renewed session: call %s, held %v", c.ID(), s.held)
	}
	o := decideIn(t, s, Client, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}`)
	if s.Spent() || o.Cancelled != c {
		t.Fatalf("after a client's cancel: Spent %t, cancelled %v", s.Spent(), o.Cancelled)
	}
}

package httpx

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
)

// fakeMember is a session for the table's tests.
type fakeMember struct {
	usage
	name     string
	isBusy   bool
	retired  []string
	requests int
}

func (m *fakeMember) busy() bool         { return m.isBusy }
func (m *fakeMember) retire(why string)  { m.retired = append(m.retired, why) }
func (m *fakeMember) stats() proxy.Stats { return proxy.Stats{Forwarded: int64(m.requests)} }
func (m *fakeMember) inFlight() int      { return m.requests }
func newMember(name string) *fakeMember  { return &fakeMember{name: name} }

// TestSessionTable: the rules every kind of session lives by: an id keeps
// its first session; at the cap the least recently used one that is not
// busy is evicted, and with none the new one is refused; the sweep retires
// the idle ones that are not busy; a session is forgotten only as itself.
func TestSessionTable(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	var tab sessionTable[*fakeMember]
	tab.init(time.Minute, 2, clk)
	a, b, c := newMember("a"), newMember("b"), newMember("c")
	if got, err := tab.add("a", a); got != a || err != nil {
		t.Fatalf("add a: %v, %v", got, err)
	}
	clk.Advance(time.Second)
	tab.add("b", b)
	if got, _ := tab.add("a", newMember("a2")); got != a {
		t.Errorf("a second session under a's id replaced it: %v", got)
	}
	clk.Advance(time.Second)
	tab.lookup("a") // now b is the least recently used
	if got, err := tab.add("c", c); got != c || err != nil || !slices.Equal(b.retired, []string{retireEvicted}) {
		t.Fatalf("add c at the cap: %v, %v; b retired %v, want evicted", got, err, b.retired)
	}
	if _, ok := tab.lookup("b"); ok {
		t.Error("b still registered after its eviction")
	}
	a.isBusy, c.isBusy = true, true
	if _, err := tab.add("d", newMember("d")); !errors.Is(err, errFull) || tab.roomFor() {
		t.Errorf("every session busy: add gave %v, want errFull, and no room", err)
	}
	a.requests, c.requests = 2, 3
	if n, st := tab.inFlight(), tab.stats(); n != 5 || st.Forwarded != 5 {
		t.Errorf("in flight %d, forwarded %d; want 5, 5", n, st.Forwarded)
	}
	clk.Advance(time.Hour)
	c.isBusy = false
	tab.sweep()
	if len(a.retired) != 0 || !slices.Equal(c.retired, []string{retireIdle}) || tab.len() != 1 {
		t.Errorf("sweep: a retired %v, c %v, %d left; want only c, idle", a.retired, c.retired, tab.len())
	}
	tab.removeIf("a", newMember("a"))
	if !tab.holds("a", a) {
		t.Error("removeIf forgot a for another session's sake")
	}
	tab.removeIf("a", a)
	if tab.len() != 0 || tab.holds("a", a) {
		t.Error("removeIf kept a")
	}
}

// TestSweepRunsUntilCleanup: the sidecar's one sweep runs every quarter of
// the idle period on its clock, over every kind of session, and stops at
// Cleanup.
func TestSweepRunsUntilCleanup(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	s := &Sidecar{Children: &Children{Argv: []string{"true"}}, Legacy: &Legacy{}, SessionIdle: time.Hour, Clock: clk}
	if err := s.Provision(); err != nil {
		t.Fatal(err)
	}
	if clk.Pending() != 1 {
		t.Fatalf("%d timers after Provision, want the sweep's", clk.Pending())
	}
	s.adopt("x", newSession("", s, false))
	clk.Advance(2 * time.Hour)
	if s.Sessions() != 0 {
		t.Error("the idle session was not swept")
	}
	s.Cleanup("done")
	if clk.Pending() != 0 {
		t.Errorf("%d timers after Cleanup, want none", clk.Pending())
	}
}

package sessiontable

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
	Usage
	name     string
	isBusy   bool
	retired  []string
	requests int
}

func (m *fakeMember) Busy() bool         { return m.isBusy }
func (m *fakeMember) Retire(why string)  { m.retired = append(m.retired, why) }
func (m *fakeMember) Stats() proxy.Stats { return proxy.Stats{Forwarded: int64(m.requests)} }
func (m *fakeMember) InFlight() int      { return m.requests }
func newMember(name string) *fakeMember  { return &fakeMember{name: name} }

// TestSessionTable: the rules every kind of session lives by: an id keeps
// its first session; at the cap the least recently used one that is not
// busy is evicted, and with none the new one is refused; the sweep retires
// the idle ones that are not busy; a session is forgotten only as itself.
func TestSessionTable(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	var tab Table[*fakeMember]
	tab.Init(time.Minute, 2, clk)
	a, b, c := newMember("a"), newMember("b"), newMember("c")
	if got, err := tab.Add("a", a); got != a || err != nil {
		t.Fatalf("add a: %v, %v", got, err)
	}
	clk.Advance(time.Second)
	tab.Add("b", b)
	if got, _ := tab.Add("a", newMember("a2")); got != a {
		t.Errorf("a second session under a's id replaced it: %v", got)
	}
	clk.Advance(time.Second)
	tab.Lookup("a") // now b is the least recently used
	if got, err := tab.Add("c", c); got != c || err != nil || !slices.Equal(b.retired, []string{RetireEvicted}) {
		t.Fatalf("add c at the cap: %v, %v; b retired %v, want evicted", got, err, b.retired)
	}
	if _, ok := tab.Lookup("b"); ok {
		t.Error("b still registered after its eviction")
	}
	a.isBusy, c.isBusy = true, true
	if _, err := tab.Add("d", newMember("d")); !errors.Is(err, ErrFull) || tab.RoomFor("") {
		t.Errorf("every session busy: add gave %v, want ErrFull, and no room", err)
	}
	a.requests, c.requests = 2, 3
	if n, st := tab.InFlight(), tab.Stats(); n != 5 || st.Forwarded != 5 {
		t.Errorf("in flight %d, forwarded %d; want 5, 5", n, st.Forwarded)
	}
	clk.Advance(time.Hour)
	c.isBusy = false
	tab.Sweep()
	if len(a.retired) != 0 || !slices.Equal(c.retired, []string{RetireIdle}) || tab.Len() != 1 {
		t.Errorf("sweep: a retired %v, c %v, %d left; want only c, idle", a.retired, c.retired, tab.Len())
	}
	tab.RemoveIf("a", newMember("a"))
	if !tab.Holds("a", a) {
		t.Error("removeIf forgot a for another session's sake")
	}
	tab.RemoveIf("a", a)
	if tab.Len() != 0 || tab.Holds("a", a) {
		t.Error("removeIf kept a")
	}
}

// startedMember is a member that says whether it saw its initialize.
type startedMember struct {
	*fakeMember
	init bool
}

func (m startedMember) Started() bool { return m.init }

// TestSessionTableIsFair: at the cap, a peer under its share (the cap
// over the peers holding sessions) evicts a session of a peer over it
// before an older one of its own kind; a peer at its share may evict only
// its own, and is refused when none of its own is idle; a stream never
// initialized goes before any other.
func TestSessionTableIsFair(t *testing.T) {
	clk := clock.NewFake(time.Unix(0, 0))
	var tab Table[*fakeMember]
	tab.Init(time.Hour, 4, clk)
	of := func(name, peer string) *fakeMember { m := newMember(name); m.Owner = peer; return m }
	b1 := of("b1", "B")
	tab.Add("b1", b1) // the oldest of all
	for _, n := range []string{"a1", "a2", "a3"} {
		clk.Advance(time.Second)
		tab.Add(n, of(n, "A"))
	}
	// B holds 1 < its share (4 over A and B: 2); A holds 3 > 2: A's oldest goes, not B's older one.
	if _, err := tab.Add("b2", of("b2", "B")); err != nil {
		t.Fatal(err)
	}
	if _, ok := tab.Lookup("a1"); ok {
		t.Error("B's new session evicted none of A's")
	}
	if _, ok := tab.Lookup("b1"); !ok {
		t.Error("B's new session evicted B's own older one while A held more than its share")
	}
	// A now holds 2, its share: it may evict only its own idle ones.
	a2, _ := tab.Lookup("a2")
	a3, _ := tab.Lookup("a3")
	a2.isBusy, a3.isBusy = true, true
	if tab.RoomFor("A") {
		t.Error("A at its share found room by evicting B's sessions")
	}
	if _, ok := tab.Lookup("b1"); !ok {
		t.Error("b1 evicted for A")
	}
	a3.isBusy = false
	if !tab.RoomFor("A") {
		t.Fatal("A found no room, with an idle session of its own")
	}
	if _, ok := tab.Lookup("a3"); ok {
		t.Error("A's room was not made from its own idle session")
	}

	var lt Table[startedMember]
	lt.Init(time.Hour, 2, clk)
	old := startedMember{of("old", "C"), true}
	lt.Add("old", old)
	clk.Advance(time.Second)
	silent := startedMember{of("silent", "C"), false}
	lt.Add("silent", silent)
	if _, err := lt.Add("new", startedMember{of("new", "C"), true}); err != nil {
		t.Fatal(err)
	}
	if _, ok := lt.Lookup("silent"); ok {
		t.Error("a stream that never initialized outlived an older initialized one")
	}
}

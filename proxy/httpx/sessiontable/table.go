// Package sessiontable holds an HTTP front's client sessions of one kind
// by id, under the rules every kind lives by: looked up by id (which marks
// the session used), forgotten once idle by one sweep, and capped, where
// at the cap a session not busy is evicted (never initialized first, then
// the least recently used, and no peer may evict another's while it holds
// more than its share) or, with none, or for a table that never evicts, the
// new one refused.
package sessiontable

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
)

// Usage is when a session last saw a request, and whose it is: a
// session embeds it to be a Member.
type Usage struct {
	last atomic.Int64
	// Owner is the peer that opened the session (the client's credential,
	// or its address), set before the session is shared: at a cap, a peer
	// holding more than its share of the sessions may evict only its own.
	Owner string
}

// Touch marks the session used at now.
func (u *Usage) Touch(now time.Time) { u.last.Store(now.UnixNano()) }

// UsedAt returns when the session was last used (UnixNano).
func (u *Usage) UsedAt() int64 { return u.last.Load() }

// Peer returns the session's Owner.
func (u *Usage) Peer() string { return u.Owner }

// Member is what a Table needs of a session (Usage gives the first three
// methods). A session may also have a method Started() bool, false until
// it has seen its initialize: such a one is evicted first.
type Member interface {
	comparable
	Touch(now time.Time)
	UsedAt() int64
	// Peer is who opened the session.
	Peer() string
	// Busy reports whether the session has a request in flight or a
	// stream open; a busy session is never idle, nor evicted.
	Busy() bool
	// Retire ends what the session runs once the table has forgotten it,
	// for why (RetireIdle or RetireEvicted). It must not block.
	Retire(why string)
	Stats() proxy.Stats
	// InFlight counts the client's requests in flight.
	InFlight() int
}

// Why a table forgets a session on its own.
const (
	RetireIdle    = "idle"
	RetireEvicted = "evicted"
)

// ErrFull is Add's answer at the cap, with no session to evict.
var ErrFull = errors.New("too many sessions, none idle")

// Table holds one kind of client session by id. Init it before use.
type Table[S Member] struct {
	mu    sync.Mutex // guards m
	m     map[string]S
	idle  time.Duration // how long a session may go unused, not busy
	max   int           // the cap on sessions; zero for none
	clock clock.Clock
	// reserved counts the slots Reserve holds for sessions about to be
	// added (AddReserved): they count against the cap.
	reserved int
	// NoEvict, set before use, refuses a session at the cap rather than
	// evicting an idle one.
	NoEvict bool
}

// Init sets the table up: a session not busy may go unused for idle before
// Sweep forgets it, at most max are held (none if zero), on clk.
func (t *Table[S]) Init(idle time.Duration, max int, clk clock.Clock) {
	t.m, t.idle, t.max, t.clock = make(map[string]S), idle, max, clk
}

// Clock returns the table's clock.
func (t *Table[S]) Clock() clock.Clock { return t.clock }

// Lookup returns the session registered under id, and marks it used.
func (t *Table[S]) Lookup(id string) (S, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.m[id]
	if ok {
		s.Touch(t.clock.Now())
	}
	return s, ok
}

// Add registers s under id and returns it, or the session already
// registered under id. At the cap it first evicts an idle session (see
// makeRoomLocked) or, with none it may evict, returns ErrFull.
func (t *Table[S]) Add(id string, s S) (S, error) {
	var zero S
	t.mu.Lock()
	if old, ok := t.m[id]; ok {
		t.mu.Unlock()
		return old, nil
	}
	evicted, ok := t.makeRoomLocked(s.Peer())
	if !ok {
		t.mu.Unlock()
		return zero, ErrFull
	}
	s.Touch(t.clock.Now())
	t.m[id] = s
	t.mu.Unlock()
	if evicted != zero {
		evicted.Retire(RetireEvicted)
	}
	return s, nil
}

// Reserve holds a slot for a session of peer about to be added with
// AddReserved (the relay's, whose id comes with its initialize's answer),
// making room as Add does; it reports false at the cap with none to evict.
// Sessions started together can then never overshoot the cap. A slot not
// used is given back with Unreserve.
func (t *Table[S]) Reserve(peer string) bool {
	t.mu.Lock()
	evicted, ok := t.makeRoomLocked(peer)
	if ok {
		t.reserved++
	}
	t.mu.Unlock()
	if evicted != *new(S) {
		evicted.Retire(RetireEvicted)
	}
	return ok
}

// Unreserve gives back a slot Reserve held and no session took.
func (t *Table[S]) Unreserve() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.reserved > 0 {
		t.reserved--
	}
}

// AddReserved registers s under id in a slot Reserve held, and returns
// the session registered: s, or the one already under id (the slot is
// given back then).
func (t *Table[S]) AddReserved(id string, s S) S {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.reserved > 0 {
		t.reserved--
	}
	if old, ok := t.m[id]; ok {
		return old
	}
	s.Touch(t.clock.Now())
	t.m[id] = s
	return s
}

// RoomFor reports whether add would find room for a session of peer,
// evicting as add does.
func (t *Table[S]) RoomFor(peer string) bool {
	t.mu.Lock()
	evicted, ok := t.makeRoomLocked(peer)
	t.mu.Unlock()
	if evicted != *new(S) {
		evicted.Retire(RetireEvicted)
	}
	return ok
}

// makeRoomLocked makes room for one more session of peer, below the cap
// or by forgetting one that is not busy, which it returns for the caller
// to retire once unlocked. Fairness: each peer's share is the cap over
// the peers holding sessions (peer counted); a peer at or over its share
// may evict only a session of its own, and one under it a session of a
// peer over its share first, else any. Among those it may evict, a
// session never initialized goes first, then the least recently used.
// t.mu is held.
func (t *Table[S]) makeRoomLocked(peer string) (evicted S, ok bool) {
	if t.max <= 0 || len(t.m)+t.reserved < t.max {
		return evicted, true
	}
	if t.NoEvict {
		return evicted, false
	}
	held := map[string]int{peer: 0}
	for _, s := range t.m {
		held[s.Peer()]++
	}
	share := max(t.max/len(held), 1)
	pick := func(may func(S) bool) string {
		best := ""
		for id, s := range t.m {
			if s.Busy() || !may(s) {
				continue
			}
			if b, ok := t.m[best]; best == "" || ok && evictsBefore(s, b) {
				best = id
			}
		}
		return best
	}
	var victim string
	if held[peer] >= share {
		victim = pick(func(s S) bool { return s.Peer() == peer })
	} else if victim = pick(func(s S) bool { return held[s.Peer()] > share }); victim == "" {
		victim = pick(func(S) bool { return true })
	}
	if victim == "" {
		return evicted, false
	}
	evicted = t.m[victim]
	delete(t.m, victim)
	return evicted, true
}

// evictsBefore reports whether a goes before b when one must be evicted:
// a session never initialized first, then the least recently used.
func evictsBefore[S Member](a, b S) bool {
	ai, bi := initializedOf(a), initializedOf(b)
	if ai != bi {
		return !ai
	}
	return a.UsedAt() < b.UsedAt()
}

// initializedOf reports whether a session has seen its initialize; a kind
// of session that cannot exist before one has.
func initializedOf(s any) bool {
	if i, ok := s.(interface{ Started() bool }); ok {
		return i.Started()
	}
	return true
}

// Remove forgets the session registered under id, and returns it.
func (t *Table[S]) Remove(id string) (S, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.m[id]
	delete(t.m, id)
	return s, ok
}

// RemoveIf forgets s, if it is still the session registered under id.
func (t *Table[S]) RemoveIf(id string, s S) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m[id] == s {
		delete(t.m, id)
	}
}

// Holds reports whether s is the session registered under id.
func (t *Table[S]) Holds(id string, s S) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return id != "" && t.m[id] == s
}

// Sweep forgets and retires the sessions unused for longer than the idle
// period that are not busy (a cancel may still come for a busy one).
func (t *Table[S]) Sweep() {
	cutoff := t.clock.Now().Add(-t.idle).UnixNano()
	var idle []S
	t.mu.Lock()
	for id, s := range t.m {
		if s.UsedAt() < cutoff && !s.Busy() {
			delete(t.m, id)
			idle = append(idle, s)
		}
	}
	t.mu.Unlock()
	for _, s := range idle {
		s.Retire(RetireIdle)
	}
}

// All returns the sessions registered now.
func (t *Table[S]) All() []S {
	t.mu.Lock()
	defer t.mu.Unlock()
	all := make([]S, 0, len(t.m))
	for _, s := range t.m {
		all = append(all, s)
	}
	return all
}

// Len returns how many sessions are registered.
func (t *Table[S]) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// Stats sums the counters of the sessions registered.
func (t *Table[S]) Stats() proxy.Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	var st proxy.Stats
	for _, s := range t.m {
		st.Add(s.Stats())
	}
	return st
}

// InFlight counts the client requests in flight in the sessions registered.
func (t *Table[S]) InFlight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, s := range t.m {
		n += s.InFlight()
	}
	return n
}

// Sweeper runs the idle sweep of tables, every period, until Stop.
type Sweeper struct {
	mu      sync.Mutex // guards the fields below
	timer   clock.Timer
	stopped bool
}

// Every runs sweep (each table's Sweep) every period, on clk, until Stop.
func (w *Sweeper) Every(clk clock.Clock, period time.Duration, sweep func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	w.timer = clk.AfterFunc(period, func() {
		sweep()
		w.Every(clk, period, sweep)
	})
}

// Stop ends the idle sweep.
func (w *Sweeper) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

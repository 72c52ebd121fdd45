package proxy

import (
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// TestLedgerCompleteCancelRace races complete against cancel on the same
// call from two goroutines, thousands of times: exactly one must win.
func TestLedgerCompleteCancelRace(t *testing.T) {
	l := newLedger(ClientToServer, time.Now, time.Minute, 1<<20)
	const n = 20000
	wins := [2]int{}
	for i := range n {
		m := framing.Message{Kind: framing.KindRequest, ID: framing.IntID(int64(i)), Method: "tools/call"}
		if _, v := l.begin(&m, nil); v != Forward {
			t.Fatalf("begin(%d) = %v", i, v)
		}
		var completed, cancelled bool
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); _, v := l.complete(m.ID, nil); completed = v == Forward }()
		go func() { defer wg.Done(); _, r := l.cancel(m.ID); cancelled = r == "" }()
		wg.Wait()
		if completed == cancelled {
			t.Fatalf("id %d: completed=%v cancelled=%v; exactly one must win", i, completed, cancelled)
		}
		if completed {
			wins[0]++
		} else {
			wins[1]++
			l.complete(m.ID, nil) // absorb the late response, as the relay would
		}
	}
	t.Logf("complete won %d, cancel won %d", wins[0], wins[1])
	if inFlight, _ := l.counts(); inFlight != 0 {
		t.Errorf("%d calls still in flight", inFlight)
	}
}

func TestLedgerRetiresCancelledCalls(t *testing.T) {
	now := time.Unix(0, 0)
	l := newLedger(ClientToServer, func() time.Time { return now }, time.Minute, 2)
	for i := range 3 {
		m := framing.Message{ID: framing.IntID(int64(i)), Method: "x", Token: framing.IntID(int64(100 + i))}
		l.begin(&m, nil)
		l.cancel(m.ID)
	}
	if _, retired := l.counts(); retired != 2 {
		t.Errorf("retired = %d, want 2 (the count bound)", retired)
	}
	if _, v := l.complete(framing.IntID(0), nil); v != Drop {
		t.Errorf("late response of a forgotten call: %v, want Drop (still never forwarded)", v)
	}
	if _, v := l.progress(framing.IntID(101)); v != Suppress {
		t.Errorf("progress of a remembered cancelled call: %v, want Suppress", v)
	}
	now = now.Add(2 * time.Minute)
	m := framing.Message{ID: framing.IntID(9), Method: "x"}
	l.begin(&m, nil) // expiry runs on the next change
	if _, retired := l.counts(); retired != 0 {
		t.Errorf("retired = %d after the TTL, want 0", retired)
	}
}

// BenchmarkLedgerMemoryPerCall measures the heap held per request in flight.
func BenchmarkLedgerMemoryPerCall(b *testing.B) {
	const n = 100000
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		l := newLedger(ClientToServer, time.Now, time.Minute, 1<<16)
		for i := range n {
			m := framing.Message{ID: framing.IntID(int64(i)), Method: "tools/call", Token: framing.IntID(int64(i))}
			l.begin(&m, nil)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/inflight")
		runtime.KeepAlive(l)
	}
}

// TestLedgerSharedIDs: with allowShared, requests in flight may share an
// id: each after the first is renamed toward the receiver, answers settle
// each by its receiver-side id (the next one taking the first's place), a
// cancel of the id takes the oldest and cancelShared the others, and
// cancelExact, counts and cancelAll see every one; without it the second
// is dropped.
func TestLedgerSharedIDs(t *testing.T) {
	req := framing.Message{Kind: framing.KindRequest, ID: framing.IntID(1), Method: "tools/call"}
	strict := newLedger(ClientToServer, time.Now, time.Minute, 100)
	strict.begin(&req, nil)
	if _, v := strict.begin(&req, nil); v != Drop {
		t.Fatalf("a second request with id 1, not shared: %v, want Drop", v)
	}
	l := newLedger(ClientToServer, time.Now, time.Minute, 100)
	l.allowShared = true
	var calls []*call
	for range 3 {
		c, v := l.begin(&req, nil)
		if v != Forward {
			t.Fatalf("begin = %v", v)
		}
		calls = append(calls, c)
	}
	if calls[0].aliased() || !calls[1].aliased() || !calls[2].aliased() || calls[1].upID == calls[2].upID {
		t.Fatalf("upstream ids %v %v %v: the first as sent, each other renamed apart", calls[0].upID, calls[1].upID, calls[2].upID)
	}
	if n, _ := l.counts(); n != 3 {
		t.Fatalf("%d in flight, want 3", n)
	}
	if c, v := l.complete(calls[0].upID, nil); v != Forward || c != calls[0] {
		t.Fatalf("the first's answer: %v %v", c, v)
	}
	if !l.cancelExact(calls[2]) {
		t.Fatal("cancelExact of the third")
	}
	c, why := l.cancel(req.ID)
	if why != "" || c != calls[1] {
		t.Fatalf("cancel of id 1 took %v (%q), want the second (the one left)", c, why)
	}
	if more := l.cancelShared(req.ID); len(more) != 0 {
		t.Errorf("cancelShared after every one was cancelled: %v", more)
	}
	if n, _ := l.counts(); n != 0 {
		t.Errorf("%d in flight, want 0", n)
	}
	for range 2 {
		l.begin(&req, nil)
	}
	if c, _ := l.cancel(req.ID); c == nil {
		t.Fatal("cancel of the shared id took none")
	}
	if more := l.cancelShared(req.ID); len(more) != 1 {
		t.Errorf("cancelShared took %d, want the other one", len(more))
	}
	for range 2 {
		l.begin(&req, nil)
	}
	if all := l.cancelAll(); len(all) != 2 {
		t.Errorf("cancelAll took %d, want both", len(all))
	}
}

// FuzzLedger runs a sequence of begins, cancels, answers, expiries and a
// failAll, decoded from the input, over three issuer ids, and checks the
// ledger against a model of what is in flight: per issuer id, its calls
// oldest first. The call found by an issuer's id is the model's oldest,
// a cancel takes it, an answer is taken only for a call in flight, and
// the counts agree.
func FuzzLedger(f *testing.F) {
	f.Add([]byte{1, 0, 0, 2, 1, 4, 8, 5, 6})
	f.Add([]byte{0, 0, 4, 0, 1, 2, 3, 0, 0, 6, 10})
	f.Add([]byte{1, 0, 0, 0, 1, 7, 4, 4, 0, 2, 11, 3})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) == 0 || len(ops) > 200 {
			return
		}
		now := time.Unix(0, 0)
		l := newLedger(ClientToServer, func() time.Time { return now }, time.Minute, 2)
		l.allowShared = ops[0]&1 == 1
		model := map[framing.ID][]*call{}
		var made []*call
		drop := func(c *call) {
			cs := model[c.id]
			for i, o := range cs {
				if o == c {
					model[c.id] = append(cs[:i:i], cs[i+1:]...)
					return
				}
			}
			t.Fatalf("call %v (up %v) taken, but not in flight", c.id, c.upID)
		}
		for _, b := range ops[1:] {
			id := framing.IntID(int64(b>>2) % 3)
			switch b & 3 {
			case 0:
				m := framing.Message{Kind: framing.KindRequest, ID: id, Method: "tools/call", Token: framing.IntID(int64(b>>2) % 2)}
				c, v := l.begin(&m, nil)
				switch {
				case v == Drop && (l.allowShared || len(model[id]) == 0):
					t.Fatalf("begin %v refused with %d in flight", id, len(model[id]))
				case v != Drop && !l.allowShared && len(model[id]) > 0:
					t.Fatalf("begin %v taken while one is in flight", id)
				case v != Drop:
					model[id] = append(model[id], c)
					made = append(made, c)
				}
			case 1:
				c, reason := l.cancel(id)
				if len(model[id]) == 0 != (reason != "") || c != nil && c != model[id][0] {
					t.Fatalf("cancel %v: %v %q; model %v", id, c, reason, model[id])
				}
				if c != nil {
					drop(c)
				}
			case 2:
				if len(made) == 0 {
					continue
				}
				want := made[int(b>>2)%len(made)]
				inFlight := slices.Contains(model[want.id], want)
				c, v := l.complete(want.upID, nil)
				if v == Forward {
					drop(c)
				} else if inFlight {
					t.Fatalf("answer to %v (up %v), in flight, was %v", want.id, want.upID, v)
				}
			case 3:
				if b>>2 == 0 {
					for _, c := range l.failAll() {
						drop(c)
					}
				} else {
					now = now.Add(time.Minute)
				}
			}
			n := 0
			for k, cs := range model {
				n += len(cs)
				var oldest *call
				if len(cs) > 0 {
					oldest = cs[0]
				}
				l.mu.Lock()
				got := l.liveAtLocked(k)
				l.mu.Unlock()
				if got != oldest {
					t.Fatalf("in flight under %v: %v, model %v", k, got, oldest)
				}
			}
			if inFlight, _ := l.counts(); inFlight != n {
				t.Fatalf("%d in flight, model %d", inFlight, n)
			}
		}
	})
}

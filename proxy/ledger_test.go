package proxy

import (
	"runtime"
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

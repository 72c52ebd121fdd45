package stream

import (
	"errors"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
)

// fakeBody records how it was closed.
type fakeBody struct{ closed []error }

func (b *fakeBody) Read([]byte) (int, error)       { return 0, nil }
func (b *fakeBody) CloseWithError(err error) error { b.closed = append(b.closed, err); return nil }

// TestStreamStates: a cancelled stream stays open for the grace, then ends
// (or, lingering, lets its client go and ends after the linger); it moves
// only forward, an end stops its grace, and a body that comes after the
// end is closed at once.
func TestStreamStates(t *testing.T) {
	clk := clock.NewFake(time.Now())
	newSt := func(linger time.Duration) (*Stream, *fakeBody) {
		st := New(clk)
		if linger > 0 {
			st.LingerFor(linger)
		}
		b := &fakeBody{}
		if !st.SetBody(b) {
			t.Fatal("setBody on an open stream refused")
		}
		return st, b
	}
	state := func(st *Stream) state { st.mu.Lock(); defer st.mu.Unlock(); return st.state }

	st, b := newSt(0)
	st.EndAfter(time.Second)
	st.EndAfter(time.Hour) // a second cancel does not move the grace
	clk.Advance(999 * time.Millisecond)
	if state(st) != grace || len(b.closed) != 0 {
		t.Fatalf("in the grace: state %d, closes %v", state(st), b.closed)
	}
	clk.Advance(time.Millisecond)
	if state(st) != ended || len(b.closed) != 1 || !errors.Is(b.closed[0], ErrCancelled) || !st.WasCut() {
		t.Fatalf("after the grace: state %d, closes %v, cut %v", state(st), b.closed, st.WasCut())
	}
	select {
	case <-st.Watched():
	default:
		t.Error("watched not closed at the end")
	}

	st, b = newSt(time.Minute)
	st.EndAfter(time.Second)
	clk.Advance(time.Second)
	select {
	case <-st.Quit():
	default:
		t.Fatal("a lingering stream's quit not closed after the grace")
	}
	if state(st) != lingering || len(b.closed) != 0 {
		t.Fatalf("lingering: state %d, closes %v", state(st), b.closed)
	}
	st.release() // once only
	clk.Advance(time.Minute)
	if state(st) != ended || len(b.closed) != 1 {
		t.Fatalf("after the linger: state %d, closes %v", state(st), b.closed)
	}

	st, b = newSt(0)
	st.EndAfter(time.Second)
	st.CloseWithError(nil) // the answer came in the grace
	if n := clk.Pending(); n != 0 {
		t.Errorf("%d timers left after the end", n)
	}
	if st.WasCut() || len(b.closed) != 1 {
		t.Errorf("ended cleanly: cut %v, closes %v", st.WasCut(), b.closed)
	}
	late := &fakeBody{}
	if st.SetBody(late) || len(late.closed) != 1 {
		t.Errorf("a body after the end: taken, or not closed (%v)", late.closed)
	}
	st.EndAfter(time.Second)
	if state(st) != ended || clk.Pending() != 0 {
		t.Error("an ended stream went back to its grace")
	}
}

// TestStreamKept: a kept stream (a cancel the policy defers) lingers past
// its linger, a linger of 0 among them, until StopKeeping; then it ends
// after its linger. One kept and never released lingers as any other.
func TestStreamKept(t *testing.T) {
	clk := clock.NewFake(time.Now())
	state := func(st *Stream) state { st.mu.Lock(); defer st.mu.Unlock(); return st.state }
	for _, linger := range []time.Duration{0, time.Minute} {
		st := New(clk)
		st.LingerFor(linger)
		st.Keep()
		b := &fakeBody{}
		st.SetBody(b)
		st.EndAfter(time.Second)
		clk.Advance(time.Second + time.Hour)
		if state(st) != lingering || len(b.closed) != 0 {
			t.Fatalf("linger %v, kept: state %d, closes %v", linger, state(st), b.closed)
		}
		st.StopKeeping()
		st.StopKeeping() // once only
		clk.Advance(linger)
		if state(st) != ended || len(b.closed) != 1 {
			t.Fatalf("linger %v, after StopKeeping and the linger: state %d, closes %v", linger, state(st), b.closed)
		}
	}
	st := New(clk)
	st.LingerFor(time.Minute)
	st.Keep()
	st.StopKeeping() // before the cancel: it lingers as any other
	st.EndAfter(time.Second)
	clk.Advance(time.Second + time.Minute)
	if state(st) != ended {
		t.Fatalf("kept, then not, before the cancel: state %d after the grace and linger", state(st))
	}
}

// TestFinishLingers: a stream ended with the proxy's own last message (a
// deadline's error) ends at once, unless it lingers: then its client's
// side is over (Quit, the message taken once) and its upstream's is read
// on for the linger, as after a cancel.
func TestFinishLingers(t *testing.T) {
	clk := clock.NewFake(time.Now())
	st, b := New(clk), &fakeBody{}
	st.SetBody(b)
	st.Finish([]byte("timeout"))
	if !st.Ended() || len(b.closed) != 1 || string(st.TakeFinal()) != "timeout" {
		t.Fatalf("finished: ended %t, closes %v", st.Ended(), b.closed)
	}

	st, b = New(clk), &fakeBody{}
	st.LingerFor(time.Minute)
	st.SetBody(b)
	st.Finish([]byte("timeout"))
	select {
	case <-st.Quit():
	default:
		t.Fatal("a lingering stream's quit not closed when it is finished")
	}
	if st.Ended() || len(b.closed) != 0 || string(st.TakeFinal()) != "timeout" || st.TakeFinal() != nil {
		t.Fatalf("finished, lingering: ended %t, closes %v", st.Ended(), b.closed)
	}
	clk.Advance(time.Minute)
	if !st.Ended() || len(b.closed) != 1 {
		t.Fatalf("after the linger: ended %t, closes %v", st.Ended(), b.closed)
	}
}

package upstream

import (
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
)

// TestBeforeCancel: a cancel waits for its request to be written, then for
// its headers or TakenInWait, whichever is first; a nil Posting and a
// hurry wait for nothing.
func TestBeforeCancel(t *testing.T) {
	clk := clock.NewFake(time.Now())
	waited := func(p *Posting, hurry chan struct{}) <-chan struct{} {
		done := make(chan struct{})
		go func() { p.BeforeCancel(clk, hurry); close(done) }()
		return done
	}
	wait := func(what string, done <-chan struct{}) {
		t.Helper()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: still waiting", what)
		}
	}
	wait("nil", waited(nil, nil))

	p := NewPosting()
	armed := clk.Armed()
	done := waited(p, nil)
	p.Close()
	<-armed // written, and no headers: waiting TakenInWait
	select {
	case <-done:
		t.Fatal("did not wait for the headers")
	default:
	}
	clk.Advance(TakenInWait - time.Millisecond)
	select {
	case <-done:
		t.Fatal("waited less than TakenInWait")
	default:
	}
	clk.Advance(time.Millisecond)
	wait("TakenInWait passed", done)

	p = NewPosting()
	p.Close()
	armed = clk.Armed()
	done = waited(p, nil)
	<-armed
	p.Headed()
	p.Headed() // again: nothing
	wait("headed", done)

	p = NewPosting() // never written, then failed
	done = waited(p, nil)
	p.Headed()
	wait("failed unwritten", done)

	hurry := make(chan struct{})
	done = waited(NewPosting(), hurry) // never written
	close(hurry)
	wait("hurried", done)
	if n := clk.Pending(); n != 0 {
		t.Errorf("%d timers left set", n)
	}
}

package actor_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/actor"
)

// TestFirstToReturnEndsTheGroup: the first actor's return interrupts every
// actor, in the order they were added, with its error, and Run returns that
// error only after every actor has returned.
func TestFirstToReturnEndsTheGroup(t *testing.T) {
	var g actor.Group
	boom := errors.New("boom")
	var order []string
	first := make(chan struct{})
	g.Add(func() error { <-first; return boom }, func(err error) { order = append(order, "first:"+err.Error()) })
	var ended atomic.Int32
	for _, name := range []string{"a", "b"} {
		quit := make(chan struct{})
		g.Add(func() error { <-quit; ended.Add(1); return nil }, func(err error) {
			order = append(order, name+":"+err.Error())
			close(quit)
		})
	}
	close(first)
	if err := g.Run(); err != boom {
		t.Fatalf("Run = %v, want the first actor's error", err)
	}
	if ended.Load() != 2 {
		t.Fatalf("Run returned before every actor had")
	}
	if got := []string{"first:boom", "a:boom", "b:boom"}; !equal(order, got) {
		t.Fatalf("interrupts %v, want %v", order, got)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestEmptyGroup returns at once.
func TestEmptyGroup(t *testing.T) {
	var g actor.Group
	if err := g.Run(); err != nil {
		t.Fatal(err)
	}
}

// TestUntilStopsAtTheEnd: a resource actor runs its stop when the group
// ends, and not before.
func TestUntilStopsAtTheEnd(t *testing.T) {
	var g actor.Group
	var stopped atomic.Bool
	g.Add(actor.Until(func() { stopped.Store(true) }))
	end := make(chan struct{})
	g.Add(func() error {
		<-end
		if stopped.Load() {
			return errors.New("stopped before the group ended")
		}
		return nil
	}, func(error) {})
	close(end)
	if err := g.Run(); err != nil {
		t.Fatal(err)
	}
	if !stopped.Load() {
		t.Fatal("the resource was not stopped")
	}
}

// TestSignalsInterrupted returns nil when the group ends for another
// reason.
func TestSignalsInterrupted(t *testing.T) {
	sigs := actor.Catch(context.Background())
	sigs.Stop(errors.New("elsewhere"))
	sigs.Stop(nil)
	if err := sigs.Run(); err != nil {
		t.Fatalf("ended with %v", err)
	}
}

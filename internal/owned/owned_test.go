package owned

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestGroup: Wait returns at once with nothing running, once the last
// goroutine ends when some run (one added while it waits included), and
// after its bound, saying how many are left, when one never ends.
func TestGroup(t *testing.T) {
	var g Group
	if ok, n := g.Wait(time.Hour); !ok || n != 0 {
		t.Fatalf("empty: %v %d", ok, n)
	}
	release := make(chan struct{})
	g.Go(func() { <-release })
	started := make(chan struct{})
	go func() {
		g.Add() // while Wait waits
		close(started)
		<-release
		g.Done()
	}()
	<-started
	waited := make(chan bool)
	go func() { ok, _ := g.Wait(time.Hour); waited <- ok }()
	close(release)
	if !<-waited {
		t.Fatal("Wait gave up with its bound an hour away")
	}
	stuck := make(chan struct{})
	g.Go(func() { <-stuck })
	if ok, n := g.Wait(time.Millisecond); ok || n != 1 {
		t.Errorf("a goroutine that never ends: %v %d, want false and 1", ok, n)
	}
	close(stuck)
	g.Wait(time.Hour)
}

// Package owned gives the goroutines that outlive the request that
// started them an owner that waits for them, within a bound.
package owned

import (
	"sync"
	"time"
)

// Group starts goroutines and waits for them: the owner of the ones a
// front starts for work that outlives the request that caused it (a
// cancel's notification to the upstream). Unlike a sync.WaitGroup's, its
// Add may be called while Wait waits; Wait returns once none is running,
// or its bound has passed. The zero Group is ready.
type Group struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; made by Wait
}

// Add counts a goroutine about to start; it calls Done when it ends.
func (g *Group) Add() {
	g.mu.Lock()
	g.n++
	g.mu.Unlock()
}

// Done is called by a goroutine Add counted, when it ends.
func (g *Group) Done() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n--; g.n == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// Go runs f on a goroutine of the group's.
func (g *Group) Go(f func()) {
	g.Add()
	go func() {
		defer g.Done()
		f()
	}()
}

// Idle reports whether no goroutine of the group's is running.
func (g *Group) Idle() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n == 0
}

// Wait returns once no goroutine of the group's is running, and reports
// true; or, if some still are after d (each waits for a peer, which a hung
// peer never answers), false, and how many.
func (g *Group) Wait(d time.Duration) (bool, int) {
	g.mu.Lock()
	if g.n == 0 {
		g.mu.Unlock()
		return true, 0
	}
	if g.idle == nil {
		g.idle = make(chan struct{})
	}
	idle := g.idle
	g.mu.Unlock()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-idle:
		return true, 0
	case <-timer.C:
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.n == 0, g.n
	}
}

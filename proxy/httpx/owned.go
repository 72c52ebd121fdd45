package httpx

import (
	"sync"
	"time"
)

// goGroup starts goroutines and waits for them: the owner of the ones a
// front starts for work that outlives the request that caused it (a
// cancel's notification to the upstream). Unlike a sync.WaitGroup's, its
// add may be called while Wait waits; Wait returns once none is running.
type goGroup struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; made by Wait
}

// add counts a goroutine about to start; it calls done when it ends.
func (g *goGroup) add() {
	g.mu.Lock()
	g.n++
	g.mu.Unlock()
}

// done is called by a goroutine add counted, when it ends.
func (g *goGroup) done() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n--; g.n == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// Go runs f on a goroutine of the group's.
func (g *goGroup) Go(f func()) {
	g.add()
	go func() {
		defer g.done()
		f()
	}()
}

// wait returns once no goroutine of the group's is running, and reports
// true; or, if some still are after d (each is bounded by the upstream's
// answer, which a hung upstream never gives), false, and how many.
func (g *goGroup) wait(d time.Duration) (bool, int) {
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

// ownedWait bounds how long a DELETE waits for its session's cancels to
// reach the upstream, and a shutdown for the cancels, then for the rest
// the sidecar started. A variable for the tests.
var ownedWait = 5 * time.Second

package httpx

import "sync"

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

// Wait returns once no goroutine of the group's is running.
func (g *goGroup) Wait() {
	g.mu.Lock()
	if g.n == 0 {
		g.mu.Unlock()
		return
	}
	if g.idle == nil {
		g.idle = make(chan struct{})
	}
	idle := g.idle
	g.mu.Unlock()
	<-idle
}

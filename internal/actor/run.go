// Package actor runs the actors a mode of the proxy is built of (its signal
// reader, its relay or front, its admin listener, its reload watcher) as one
// group with one lifetime, after oklog/run: each actor is a function that
// runs it until it is done and a function that makes it return. The first
// actor to return ends the group: every actor is interrupted, and the group
// returns once all of them have.
package actor

import "sync"

// Group is a set of actors run together. The zero Group is empty and ready.
type Group struct {
	actors []actor
}

type actor struct {
	execute   func() error
	interrupt func(error)
}

// Add adds an actor. execute runs it until it is done or interrupted;
// interrupt makes execute return, is called once, with the error that ended
// the group (that of the first actor to return, which is interrupted too),
// and must not wait for execute to return.
func (g *Group) Add(execute func() error, interrupt func(error)) {
	g.actors = append(g.actors, actor{execute, interrupt})
}

// Run runs every actor, each in a goroutine of its own, until the first
// returns; it then interrupts them all, in the order they were added, waits
// until every execute has returned, and returns the first one's error. With
// no actors it returns nil at once.
func (g *Group) Run() error {
	if len(g.actors) == 0 {
		return nil
	}
	errs := make(chan error, len(g.actors))
	var wg sync.WaitGroup
	for _, a := range g.actors {
		wg.Go(func() { errs <- a.execute() })
	}
	first := <-errs
	for _, a := range g.actors {
		a.interrupt(first)
	}
	wg.Wait()
	return first
}

// Until returns an actor that does nothing but wait to be interrupted, and
// then runs stop before it returns: a resource whose work runs elsewhere
// (a listener serving in goroutines of its own) and that the group's end
// must stop.
func Until(stop func()) (execute func() error, interrupt func(error)) {
	quit := make(chan struct{})
	return func() error {
			<-quit
			stop()
			return nil
		}, func(error) {
			close(quit)
		}
}

package policy

import (
	"sync"
	"time"
)

// slots caps the requests of one rule in flight at once; the rest wait in
// arrival order. The count is this process's, or, with dist, the fleet's:
// then every request waits here until a fleet-wide slot is taken for it,
// in this process's arrival order (across replicas, whichever finds a slot
// free first takes it: no order holds between them).
type slots struct {
	mu      sync.Mutex
	avail   int
	waiting []*record
	dist    distSlots // the fleet's count, if any
	running bool      // the fleet granter runs
	kick    chan struct{}
}

// distSlots is a fleet-wide count of slots (fleet.Semaphore).
type distSlots interface {
	TryAcquire() (release func(), ok bool)
	Changed() <-chan struct{}
	Recheck() time.Duration
}

func newSlots(n int) *slots { return &slots{avail: n} }

// newFleetSlots returns slots counted fleet-wide by dist.
func newFleetSlots(dist distSlots) *slots {
	return &slots{dist: dist, kick: make(chan struct{}, 1)}
}

// acquire takes a slot for r, or queues r and reports false. Fleet-wide,
// r always waits: the granter takes a slot for it off the caller's path.
func (s *slots) acquire(r *record) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dist == nil && s.avail > 0 && len(s.waiting) == 0 {
		s.avail--
		return true
	}
	s.waiting = append(s.waiting, r)
	if s.dist != nil {
		s.wakeLocked()
	}
	return false
}

// wakeLocked has the granter look for a slot, starting it if need be.
func (s *slots) wakeLocked() {
	if !s.running {
		s.running = true
		go s.grant()
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// grant takes fleet-wide slots for the waiting requests, in order, while
// any wait: when told, when this process frees a slot, and every Recheck
// for the slots of other replicas.
func (s *slots) grant() {
	tick := time.NewTicker(s.dist.Recheck())
	defer tick.Stop()
	for {
		for s.grantOne() {
		}
		s.mu.Lock()
		if len(s.waiting) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		select {
		case <-s.kick:
		case <-s.dist.Changed():
		case <-tick.C:
		}
	}
}

// grantOne gives the first waiting request a fleet-wide slot, if one is
// free, and reports whether it did.
func (s *slots) grantOne() bool {
	s.mu.Lock()
	empty := len(s.waiting) == 0
	s.mu.Unlock()
	if empty {
		return false
	}
	lease, ok := s.dist.TryAcquire()
	if !ok {
		return false
	}
	s.mu.Lock()
	if len(s.waiting) == 0 { // withdrawn meanwhile
		s.mu.Unlock()
		lease()
		return false
	}
	next := s.waiting[0]
	s.waiting[0] = nil
	s.waiting = s.waiting[1:]
	s.mu.Unlock()
	next.g.granted(next, lease)
	return true
}

// free gives back a slot: the fleet-wide one lease holds, or this
// process's, which goes to the next waiting request.
func (s *slots) free(lease func()) {
	switch {
	case s == nil:
	case s.dist != nil:
		if lease != nil {
			lease()
		}
		s.mu.Lock()
		if len(s.waiting) > 0 {
			s.wakeLocked()
		}
		s.mu.Unlock()
	default:
		handOff(s)
	}
}

// release gives a slot back and returns the waiting record that takes it,
// if any.
func (s *slots) release() *record {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiting) > 0 {
		next := s.waiting[0]
		s.waiting[0] = nil
		s.waiting = s.waiting[1:]
		return next
	}
	s.avail++
	return nil
}

// remove takes r out of the queue, and reports whether it was waiting.
func (s *slots) remove(r *record) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, w := range s.waiting {
		if w == r {
			s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
			return true
		}
	}
	return false
}

package policy

import "sync"

// slots caps the requests of one rule in flight at once; the rest wait in
// arrival order.
type slots struct {
	mu      sync.Mutex
	free    int
	waiting []*record
}

func newSlots(n int) *slots { return &slots{free: n} }

// acquire takes a slot for r, or queues r and reports false.
func (s *slots) acquire(r *record) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free > 0 && len(s.waiting) == 0 {
		s.free--
		return true
	}
	s.waiting = append(s.waiting, r)
	return false
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
	s.free++
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

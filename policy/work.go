package policy

import "sync"

// workQueue runs a governor's actions on the transport one at a time, in
// order, on a goroutine of its own, so that no Governor method ever waits
// for the transport.
type workQueue struct {
	mu      sync.Mutex
	pending []func()
	running bool
	closed  bool
}

// post queues f; it runs after everything posted before it.
func (q *workQueue) post(f func()) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.pending = append(q.pending, f)
	if !q.running {
		q.running = true
		go q.drain()
	}
}

func (q *workQueue) drain() {
	for {
		q.mu.Lock()
		if len(q.pending) == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		f := q.pending[0]
		q.pending[0] = nil
		q.pending = q.pending[1:]
		q.mu.Unlock()
		f()
	}
}

// close drops what is queued and refuses more.
func (q *workQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.pending = nil
}

// busy reports whether actions are queued or running.
func (q *workQueue) busy() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.running || len(q.pending) > 0
}

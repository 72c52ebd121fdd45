package policy

import (
	"container/list"
	"sync"
)

// The bound on the tasks hosted across the process.

// Defaults of Options.TaskMemory and HostedTasks.
const (
	DefaultTaskMemory  = 64 << 20
	DefaultHostedTasks = 1024
)

// hostedBound bounds the tasks hosted across the process: in entries (all
// of them, working or not) and in the bytes of their results, the oldest
// terminal task dropped first. A task over the entries with none terminal
// to drop is refused.
type hostedBound struct {
	maxBytes   int64
	maxEntries int
	metrics    Metrics

	mu      sync.Mutex // guards the fields below; taken after a governor's, never before
	bytes   int64
	entries int
	order   list.List // of *hostedEntry, terminal tasks, oldest first
}

// hostedEntry is a hosted task as the bound counts it.
type hostedEntry struct {
	h     *hosted
	g     *governor
	bytes int64
	elem  *list.Element // in order, once terminal
}

// admit counts h, hosted for g, if the entries allow (dropping the oldest
// terminal task if need be; the drop runs later, off g's lock).
func (b *hostedBound) admit(h *hosted, g *governor) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.entries >= b.maxEntries {
		front := b.order.Front()
		if front == nil {
			return false
		}
		b.dropLocked(front.Value.(*hostedEntry))
	}
	h.entry = &hostedEntry{h: h, g: g}
	b.entries++
	b.metrics.TasksHosted(b.bytes, b.entries)
	return true
}

// grew counts h, now terminal, with n bytes of result, and drops the
// oldest terminal tasks beyond the bound in bytes.
func (b *hostedBound) grew(h *hosted, n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := h.entry
	if e == nil || e.elem != nil {
		return
	}
	e.bytes = int64(n)
	b.bytes += e.bytes
	e.elem = b.order.PushBack(e)
	for b.bytes > b.maxBytes && b.order.Len() > 0 {
		b.dropLocked(b.order.Front().Value.(*hostedEntry))
	}
	b.metrics.TasksHosted(b.bytes, b.entries)
}

// dropLocked uncounts e, a terminal task, and has its governor forget it.
func (b *hostedBound) dropLocked(e *hostedEntry) {
	b.uncountLocked(e)
	b.metrics.TaskDropped()
	e.g.work.post(func() { e.g.forgetHosted(e.h) }) // off the bound's lock, and off the caller's governor's
}

// remove uncounts h, if it is counted.
func (b *hostedBound) remove(h *hosted) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h.entry != nil {
		b.uncountLocked(h.entry)
		b.metrics.TasksHosted(b.bytes, b.entries)
	}
}

func (b *hostedBound) uncountLocked(e *hostedEntry) {
	if e.h.entry != e {
		return
	}
	e.h.entry = nil
	b.entries--
	if e.elem != nil {
		b.order.Remove(e.elem)
		b.bytes -= e.bytes
	}
}

package policy

import (
	"container/list"
	"slices"
	"sync"
)

// The bound on the tasks hosted across the process.

// Defaults of Options.TaskMemory and HostedTasks (HostedTasksPerPrincipal's
// is an eighth of HostedTasks).
const (
	DefaultTaskMemory  = 64 << 20
	DefaultHostedTasks = 1024
)

// hostedBound bounds the tasks hosted across the process: in entries (all
// of them, working or not) and in the bytes of their results, the oldest
// terminal task dropped first; and the entries of one principal, and of
// one peer, where the process serves several clients, so that one client
// cannot take them all (one filled 1,024 in 2.9 s, and every other
// client's task was refused for up to the task ttl). A task over a bound
// with no terminal task to drop within it is refused.
type hostedBound struct {
	maxBytes   int64
	maxEntries int
	perOwner   int // entries of one principal, and of one peer
	metrics    Metrics

	mu      sync.Mutex // guards the fields below; taken after a governor's, never before
	bytes   int64
	entries int
	order   list.List      // of *hostedEntry, terminal tasks, oldest first
	owned   map[string]int // entries by "principal "+principal and "peer "+peer
}

// hostedEntry is a hosted task as the bound counts it.
type hostedEntry struct {
	h      *hosted
	g      *governor
	bytes  int64
	elem   *list.Element // in order, once terminal
	owners []string      // its keys in owned
}

// Settings a hosted task is refused for, named in the refusal.
const (
	keyHostedTasks             = "limits.hosted_tasks"
	keyHostedTasksPerPrincipal = "limits.hosted_tasks_per_principal"
)

// admit counts h, hosted for g for principal and peer ("" where the
// process serves one client), if the bounds allow, dropping the oldest
// terminal task within a bound if need be (the drop runs later, off g's
// lock). It returns "" or the setting whose bound refused h.
func (b *hostedBound) admit(h *hosted, g *governor, principal, peer string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var owners []string
	if principal != "" {
		owners = append(owners, "principal "+principal)
	}
	if peer != "" {
		owners = append(owners, "peer "+peer)
	}
	for _, o := range owners {
		if b.owned[o] >= b.perOwner && !b.dropOldestLocked(o) {
			return keyHostedTasksPerPrincipal
		}
	}
	if b.entries >= b.maxEntries && !b.dropOldestLocked("") {
		return keyHostedTasks
	}
	h.entry = &hostedEntry{h: h, g: g, owners: owners}
	b.entries++
	if b.owned == nil {
		b.owned = map[string]int{}
	}
	for _, o := range owners {
		b.owned[o]++
	}
	b.metrics.TasksHosted(b.bytes, b.entries)
	return ""
}

// dropOldestLocked drops the oldest terminal task, of owner if not "",
// and reports whether there was one.
func (b *hostedBound) dropOldestLocked(owner string) bool {
	for el := b.order.Front(); el != nil; el = el.Next() {
		if e := el.Value.(*hostedEntry); owner == "" || slices.Contains(e.owners, owner) {
			b.dropLocked(e)
			return true
		}
	}
	return false
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
	for _, o := range e.owners {
		if b.owned[o]--; b.owned[o] <= 0 {
			delete(b.owned, o)
		}
	}
	if e.elem != nil {
		b.order.Remove(e.elem)
		b.bytes -= e.bytes
	}
}

package proxy

import "iter"

// CallList is a list of calls with a note on each, threaded through the
// calls themselves: adding and removing a call allocates nothing and looks
// nothing up. A Governor keeps the calls it keeps no record of in one (a
// call no rule governs, with its tool for the audit line should it be
// cancelled). A call is in one list at a time; a list is guarded by its
// owner's lock, and only its owner touches the calls' list fields.
type CallList struct {
	head, tail *Call
	n          int
}

// listing is a call's place in a CallList.
type listing struct {
	in         *CallList
	prev, next *Call
	note       string
}

// Add puts c at the end of l with note; a call l holds already keeps its
// place and takes the new note.
func (l *CallList) Add(c *Call, note string) {
	if c.list.in == l {
		c.list.note = note
		return
	}
	if c.list.in != nil { // another list's, which a call of one session never is
		c.list.in.Remove(c)
	}
	c.list = listing{in: l, prev: l.tail, note: note}
	if l.tail != nil {
		l.tail.list.next = c
	} else {
		l.head = c
	}
	l.tail = c
	l.n++
}

// Remove takes c out of l and returns its note; false when c is not in l.
func (l *CallList) Remove(c *Call) (string, bool) {
	if c.list.in != l {
		return "", false
	}
	if p := c.list.prev; p != nil {
		p.list.next = c.list.next
	} else {
		l.head = c.list.next
	}
	if n := c.list.next; n != nil {
		n.list.prev = c.list.prev
	} else {
		l.tail = c.list.prev
	}
	note := c.list.note
	c.list = listing{}
	l.n--
	return note, true
}

// Len returns how many calls l holds.
func (l *CallList) Len() int { return l.n }

// All yields the calls of l, oldest added first; the loop must not change l.
func (l *CallList) All() iter.Seq[*Call] {
	return func(yield func(*Call) bool) {
		for c := l.head; c != nil; c = c.list.next {
			if !yield(c) {
				return
			}
		}
	}
}

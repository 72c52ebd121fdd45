package framing

import "iter"

// IDMap is a map from ID to V: what map[ID]V is, at less cost per
// operation. The runtime hashes a struct key field by field, its string
// even when empty; here an integer id, what nearly every client sends,
// takes the runtime's 64-bit fast path, and a string id its string path.
// One id is kept in place, beside the maps: a map that never holds more
// than one (most of a request's own session's) makes none. The zero IDMap
// is empty and ready to use, and a nil *IDMap is an empty one to all but
// Set; it is not safe for concurrent use.
type IDMap[V any] struct {
	has  bool // one holds an id, which is in none of the maps
	one  ID
	oneV V
	ints map[int64]V  // idInt
	strs map[string]V // idString
	rest map[ID]V     // idNumber, and the zero ID
}

// Get returns the value stored for id, and whether there is one.
func (m *IDMap[V]) Get(id ID) (V, bool) {
	if m == nil {
		var zero V
		return zero, false
	}
	if m.has && m.one == id {
		return m.oneV, true
	}
	return m.inMaps(id)
}

// inMaps returns the value the maps hold for id, and whether they hold one.
func (m *IDMap[V]) inMaps(id ID) (V, bool) {
	var v V
	var ok bool
	switch id.kind {
	case idInt:
		v, ok = m.ints[id.num]
	case idString:
		v, ok = m.strs[id.str]
	default:
		v, ok = m.rest[id]
	}
	return v, ok
}

// At returns the value stored for id, or the zero V if there is none.
func (m *IDMap[V]) At(id ID) V {
	v, _ := m.Get(id)
	return v
}

// Has reports whether id has a value.
func (m *IDMap[V]) Has(id ID) bool {
	_, ok := m.Get(id)
	return ok
}

// Set stores v for id.
func (m *IDMap[V]) Set(id ID, v V) {
	switch {
	case m.has && m.one == id:
		m.oneV = v
		return
	case !m.has:
		if _, inMaps := m.inMaps(id); !inMaps {
			m.has, m.one, m.oneV = true, id, v
			return
		}
	}
	switch id.kind {
	case idInt:
		if m.ints == nil {
			m.ints = make(map[int64]V)
		}
		m.ints[id.num] = v
	case idString:
		if m.strs == nil {
			m.strs = make(map[string]V)
		}
		m.strs[id.str] = v
	default:
		if m.rest == nil {
			m.rest = make(map[ID]V)
		}
		m.rest[id] = v
	}
}

// Delete removes id's value, if any.
func (m *IDMap[V]) Delete(id ID) {
	if m == nil {
		return
	}
	if m.has && m.one == id {
		var zero V
		m.has, m.one, m.oneV = false, ID{}, zero // nothing kept alive
		return
	}
	switch id.kind {
	case idInt:
		delete(m.ints, id.num)
	case idString:
		delete(m.strs, id.str)
	default:
		delete(m.rest, id)
	}
}

// Len returns the number of ids with a value.
func (m *IDMap[V]) Len() int {
	if m == nil {
		return 0
	}
	n := len(m.ints) + len(m.strs) + len(m.rest)
	if m.has {
		n++
	}
	return n
}

// Clear removes every value.
func (m *IDMap[V]) Clear() {
	if m == nil {
		return
	}
	var zero V
	m.has, m.one, m.oneV = false, ID{}, zero
	clear(m.ints)
	clear(m.strs)
	clear(m.rest)
}

// All yields every id and its value, in no particular order. The map must
// not change while it runs, except by deleting the id yielded.
func (m *IDMap[V]) All() iter.Seq2[ID, V] {
	return func(yield func(ID, V) bool) {
		if m == nil {
			return
		}
		if m.has && !yield(m.one, m.oneV) {
			return
		}
		for n, v := range m.ints {
			if !yield(IntID(n), v) {
				return
			}
		}
		for s, v := range m.strs {
			if !yield(StringID(s), v) {
				return
			}
		}
		for id, v := range m.rest {
			if !yield(id, v) {
				return
			}
		}
	}
}

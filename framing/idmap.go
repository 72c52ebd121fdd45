package framing

import "iter"

// IDMap is a map from ID to V: what map[ID]V is, at less cost per
// operation. The runtime hashes a struct key field by field, its string
// even when empty; here an integer id, what nearly every client sends,
// takes the runtime's 64-bit fast path, and a string id its string path.
// The zero IDMap is empty and ready to use; it is not safe for
// concurrent use.
type IDMap[V any] struct {
	ints map[int64]V  // idInt
	strs map[string]V // idString
	rest map[ID]V     // idNumber, and the zero ID
}

// Get returns the value stored for id, and whether there is one.
func (m *IDMap[V]) Get(id ID) (V, bool) {
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
func (m *IDMap[V]) Len() int { return len(m.ints) + len(m.strs) + len(m.rest) }

// Clear removes every value.
func (m *IDMap[V]) Clear() {
	clear(m.ints)
	clear(m.strs)
	clear(m.rest)
}

// All yields every id and its value, in no particular order. The map must
// not change while it runs, except by deleting the id yielded.
func (m *IDMap[V]) All() iter.Seq2[ID, V] {
	return func(yield func(ID, V) bool) {
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

package framing

import (
	"math/rand/v2"
	"testing"
)

// TestIDMapIsAMap checks IDMap against map[ID]int over random operations on
// ids of every kind, including ones that print alike: 1, "1", 1.0 and the
// zero ID are four keys.
func TestIDMapIsAMap(t *testing.T) {
	ids := []ID{{}, IntID(1), StringID("1"), {kind: idNumber, str: "1.0"}, IntID(-1), StringID(""),
		IntID(0), StringID("a"), {kind: idNumber, str: "1e400"}, IntID(1 << 53)}
	rng := rand.New(rand.NewPCG(1, 2))
	var m IDMap[int]
	want := map[ID]int{}
	for i := range 20000 {
		id := ids[rng.IntN(len(ids))]
		switch rng.IntN(4) {
		case 0, 1:
			m.Set(id, i)
			want[id] = i
		case 2:
			m.Delete(id)
			delete(want, id)
		case 3:
			if rng.IntN(100) == 0 {
				m.Clear()
				clear(want)
			}
		}
		got, ok := m.Get(id)
		if w, wok := want[id]; got != w || ok != wok || m.Has(id) != wok || m.At(id) != w {
			t.Fatalf("step %d: Get(%v) = %d, %v; want %d, %v", i, id, got, ok, w, wok)
		}
		if m.Len() != len(want) {
			t.Fatalf("step %d: Len() = %d, want %d", i, m.Len(), len(want))
		}
		if i%97 == 0 { // All, with a deletion of what it yields now and then
			seen := map[ID]int{}
			for id, v := range m.All() {
				if _, dup := seen[id]; dup {
					t.Fatalf("step %d: All yielded %v twice", i, id)
				}
				seen[id] = v
				if rng.IntN(8) == 0 {
					m.Delete(id)
					delete(want, id)
				}
			}
			for id, v := range seen {
				if w, ok := want[id]; ok && w != v {
					t.Fatalf("step %d: All yielded %d for %v, want %d", i, v, id, w)
				}
			}
			for id := range want {
				if _, ok := seen[id]; !ok {
					t.Fatalf("step %d: All did not yield %v", i, id)
				}
			}
			if m.Len() != len(want) {
				t.Fatalf("step %d: after All, Len() = %d, want %d", i, m.Len(), len(want))
			}
		}
	}
	seen := map[ID]int{}
	for id, v := range m.All() {
		seen[id] = v
	}
	if len(seen) != len(want) {
		t.Fatalf("All yielded %v, want %v", seen, want)
	}
	for id, v := range want {
		if seen[id] != v {
			t.Fatalf("All yielded %v for %v, want %v", seen[id], id, v)
		}
	}
}

// BenchmarkIDMap compares IDMap with map[ID] for what a ledger does per
// call: an integer id set, looked up and deleted.
func BenchmarkIDMap(b *testing.B) {
	b.Run("IDMap", func(b *testing.B) {
		var m IDMap[*int]
		v := new(int)
		for i := range b.N {
			id := IntID(int64(i & 63))
			m.Set(id, v)
			m.Get(id)
			m.Delete(id)
		}
	})
	b.Run("map", func(b *testing.B) {
		m := map[ID]*int{}
		v := new(int)
		for i := range b.N {
			id := IntID(int64(i & 63))
			m[id] = v
			_ = m[id]
			delete(m, id)
		}
	})
}

// TestNilIDMap: a nil *IDMap reads as an empty one.
func TestNilIDMap(t *testing.T) {
	var m *IDMap[int]
	if v, ok := m.Get(IntID(1)); v != 0 || ok || m.Has(IntID(1)) || m.At(IntID(1)) != 0 || m.Len() != 0 {
		t.Errorf("a nil IDMap holds %d, %v; Len %d", v, ok, m.Len())
	}
	m.Delete(IntID(1))
	m.Clear()
	for id := range m.All() {
		t.Errorf("a nil IDMap yielded %v", id)
	}
}

package proxy

import (
	"slices"
	"testing"
)

// TestCallList: calls added, removed from the front, the middle and the
// end, a call added again keeping its place, one of another list; the
// notes come back with the calls, the order is the adding's.
func TestCallList(t *testing.T) {
	var l, other CallList
	calls := make([]*Call, 5)
	for i := range calls {
		calls[i] = &Call{method: "tools/call"}
		l.Add(calls[i], string(rune('a'+i)))
	}
	l.Add(calls[2], "C") // again: same place, new note
	order := func() []*Call { return slices.Collect(l.All()) }
	if got := order(); !slices.Equal(got, calls) || l.Len() != 5 {
		t.Fatalf("order %v, len %d", got, l.Len())
	}
	for _, i := range []int{0, 2, 4} {
		note, ok := l.Remove(calls[i])
		if want := map[int]string{0: "a", 2: "C", 4: "e"}[i]; !ok || note != want {
			t.Errorf("Remove(call %d) = %q, %v; want %q", i, note, ok, want)
		}
	}
	if got := order(); !slices.Equal(got, []*Call{calls[1], calls[3]}) || l.Len() != 2 {
		t.Fatalf("after removals: %v, len %d", got, l.Len())
	}
	if _, ok := l.Remove(calls[0]); ok {
		t.Error("a call removed twice")
	}
	if _, ok := other.Remove(calls[1]); ok {
		t.Error("a call removed from a list that does not hold it")
	}
	other.Add(calls[1], "moved")
	if got := order(); !slices.Equal(got, []*Call{calls[3]}) || other.Len() != 1 {
		t.Fatalf("a call added to another list stayed: %v", got)
	}
	l.Add(calls[0], "back")
	if got := order(); !slices.Equal(got, []*Call{calls[3], calls[0]}) {
		t.Fatalf("a call added again goes last: %v", got)
	}
}

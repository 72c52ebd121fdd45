package httpx

import (
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// TestStreamSet: the set holds what a map would, whichever entry sits in
// place, across deletions and re-insertions, and yields each entry once.
func TestStreamSet(t *testing.T) {
	calls := []*proxy.Call{{}, {}, {}}
	streams := []*relayed{{}, {}, {}}
	var s streamSet
	want := map[*proxy.Call]*relayed{}
	check := func(step string) {
		t.Helper()
		n := 0
		for c, st := range s.all() {
			n++
			if want[c] != st {
				t.Fatalf("%s: yielded %p -> %p, want %p", step, c, st, want[c])
			}
		}
		if n != len(want) {
			t.Fatalf("%s: %d yielded, want %d", step, n, len(want))
		}
		for _, c := range calls {
			if s.get(c) != want[c] {
				t.Fatalf("%s: get %p = %p, want %p", step, c, s.get(c), want[c])
			}
		}
		if s.get(nil) != nil {
			t.Fatalf("%s: get(nil) found a stream", step)
		}
	}
	set := func(i, j int) { s.set(calls[i], streams[j]); want[calls[i]] = streams[j] }
	del := func(i int) { s.del(calls[i]); delete(want, calls[i]) }
	check("empty")
	set(0, 0)
	set(1, 1)
	set(2, 2)
	check("three")
	del(0) // the one in place goes
	check("first deleted")
	set(1, 0) // one in the map is set again: not a second entry in place
	check("second set again")
	set(0, 1)
	check("first back")
	for c := range s.all() { // deleting what was yielded
		s.del(c)
		delete(want, c)
	}
	check("all deleted")
}

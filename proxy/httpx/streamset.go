package httpx

import (
	"iter"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// streamSet maps a session's calls in flight to the streams that carry
// their answers. A request without a session has a session of its own,
// with one call as a rule: the first entry is kept in place, and a map is
// made only for a second, which spares most requests making one. The zero
// streamSet is empty; the session's lock guards it.
type streamSet struct {
	c    *proxy.Call
	st   *relayed
	more map[*proxy.Call]*relayed
}

// get returns c's stream, or nil.
func (s *streamSet) get(c *proxy.Call) *relayed {
	if c != nil && s.c == c {
		return s.st
	}
	return s.more[c]
}

// set notes that c's answer comes on st.
func (s *streamSet) set(c *proxy.Call, st *relayed) {
	if _, ok := s.more[c]; !ok && (s.c == nil || s.c == c) {
		s.c, s.st = c, st
		return
	}
	if s.more == nil {
		s.more = map[*proxy.Call]*relayed{}
	}
	s.more[c] = st
}

// del forgets c's stream.
func (s *streamSet) del(c *proxy.Call) {
	if c != nil && s.c == c {
		s.c, s.st = nil, nil
		return
	}
	delete(s.more, c)
}

// all yields each call and its stream; the one yielded may be deleted
// meanwhile.
func (s *streamSet) all() iter.Seq2[*proxy.Call, *relayed] {
	return func(yield func(*proxy.Call, *relayed) bool) {
		if c, st := s.c, s.st; c != nil && !yield(c, st) {
			return
		}
		for c, st := range s.more {
			if !yield(c, st) {
				return
			}
		}
	}
}

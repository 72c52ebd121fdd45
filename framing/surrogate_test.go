package framing_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// TestLoneSurrogateIDRefused: an id escaping a lone UTF-16 surrogate is
// refused as an id of invalid UTF-8 is (encoding/json would decode it as
// U+FFFD: it shared a ledger key with "\ufffd" and came back as that);
// pairs, U+FFFD itself and other escapes stay valid ids.
func TestLoneSurrogateIDRefused(t *testing.T) {
	for _, c := range []struct {
		id string
		ok bool
	}{
		{`"\ud800"`, false},
		{`"\udc00"`, false},
		{`"a\ud800b"`, false},
		{`"\ud800\u0041"`, false},
		{`"\ud83d\ude00\ud800"`, false},
		{`"\\ud800"`, true}, // an escaped backslash, then text
		{`"\ud83d\ude00"`, true},
		{`"\ufffd"`, true},
		{`"\n\u0041"`, true},
	} {
		var fr framing.Frame
		err := fr.Parse([]byte(`{"jsonrpc":"2.0","id":` + c.id + `,"method":"ping"}`))
		if got := err == nil; got != c.ok {
			t.Errorf("id %s: err %v, want ok %v", c.id, err, c.ok)
		}
		if !c.ok && !errors.Is(err, framing.ErrUnportableID) {
			t.Errorf("id %s: %v, want ErrUnportableID (-32600)", c.id, err)
		}
	}
}

// TestEventTooLargeKeepsItsHead: an event over the limit is skipped with
// the start of its data, so that its caller can answer its request.
func TestEventTooLargeKeepsItsHead(t *testing.T) {
	big := `{"jsonrpc":"2.0","id":"r7","result":{"text":"` + strings.Repeat("x", 10000) + `"}}`
	rd := framing.NewSSEReader(strings.NewReader("event: message\ndata: "+big+"\n\ndata: {\"next\":1}\n\n"), 2048)
	_, err := rd.Next()
	var tl *framing.EventTooLargeError
	if !errors.As(err, &tl) || !errors.Is(err, framing.ErrEventTooLarge) {
		t.Fatalf("Next = %v, want an EventTooLargeError", err)
	}
	if id, isResponse, ok := framing.PeekID(tl.Head); !ok || !isResponse || id.String() != `"r7"` {
		t.Errorf("head %.60q: id %v, response %v, ok %v", tl.Head, id, isResponse, ok)
	}
	if ev, err := rd.Next(); err != nil || string(ev.Data) != `{"next":1}` {
		t.Errorf("the next event: %v, %v", ev, err)
	}
}

// TestEventTooLargeInOneReadKeepsItsHead: an event over the limit that
// comes whole in one read (a short one, just over a small limit) keeps the
// start of its data too.
func TestEventTooLargeInOneReadKeepsItsHead(t *testing.T) {
	big := `{"jsonrpc":"2.0","id":1,"result":{"text":"` + strings.Repeat("x", 400) + `"}}`
	for _, prefix := range []string{"", "event: message\n"} {
		rd := framing.NewSSEReader(strings.NewReader(prefix+"data: "+big+"\n\ndata: {\"next\":1}\n\n"), 300)
		_, err := rd.Next()
		var tl *framing.EventTooLargeError
		if !errors.As(err, &tl) {
			t.Fatalf("Next = %v, want an EventTooLargeError", err)
		}
		if id, isResponse, ok := framing.PeekID(tl.Head); !ok || !isResponse || id.String() != `1` {
			t.Errorf("%q: head %.60q: id %v, response %v, ok %v", prefix, tl.Head, id, isResponse, ok)
		}
		if ev, err := rd.Next(); err != nil || string(ev.Data) != `{"next":1}` {
			t.Errorf("the next event: %v, %v", ev, err)
		}
	}
}

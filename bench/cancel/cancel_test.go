//go:build linux

package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestNotificationOfTheCancelsSize: the plain notification the driver
// times beside a cancel is exactly the cancel's size, whatever the id.
func TestNotificationOfTheCancelsSize(t *testing.T) {
	for _, id := range []int64{1, 99, 123456789012} {
		if c, n := cancelBody(id), notifyBody(id); len(c) != len(n) {
			t.Errorf("id %d: cancel %d bytes (%s), notification %d (%s)", id, len(c), c, len(n), n)
		}
	}
}

// TestTallyTellsFailuresFromRaces: a message of a cancelled call that the
// server wrote after the proxy accepted the cancel, or after it read the
// cancel itself, is a failure; one it wrote before is a race.
func TestTallyTellsFailuresFromRaces(t *testing.T) {
	s := &session{front: front{name: "proxy", client: "stdio"}, rec: newRecorder()}
	c := s.rec.start(7)
	c.cancelAt = 1000
	s.rec.got([]byte(`{"jsonrpc":"2.0","id":7,"result":{"_meta":{"bench/sent":900,"bench/late":false}}}`), 1200) // raced
	s.rec.got([]byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":7,"_meta":{"bench/sent":1600,"bench/late":false}}}`), 1700)
	s.rec.got([]byte(`{"jsonrpc":"2.0","id":7,"result":{"_meta":{"bench/sent":1100,"bench/late":true}}}`), 1800)
	s.rec.got([]byte(`{"jsonrpc":"2.0","id":8,"result":{}}`), 1900) // no such call
	s.rec.cancels[7] = 1300
	s.events = &feed{path: writeFeed(t, `{"event":"cancel_accepted","time":"1970-01-01T00:00:00.000001500Z","id":"7"}`)}
	got := s.tally(7, 8)
	if got.cancels != 1 || got.forwarded != 1 || got.forward[0] != 300 || got.accepted != 1 || got.accept[0] != 500 {
		t.Errorf("tally %+v: want 1 cancel forwarded in 300 ns, accepted after 500", got)
	}
	if got.raced != 1 || got.failures != 2 {
		t.Errorf("raced %d, failures %d; want 1 and 2", got.raced, got.failures)
	}
}

func writeFeed(t *testing.T, lines string) string {
	path := t.TempDir() + "/events"
	if err := os.WriteFile(path, []byte(lines+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// FuzzReadEvents: no stream makes the event reader panic, and each event
// it yields is data the stream held.
func FuzzReadEvents(f *testing.F) {
	f.Add("event: message\ndata: {\"a\":1}\n\n")
	f.Add("data: x\r\ndata: y\r\n\r\n: keep-alive\n\nevent: endpoint\ndata: /m?s=1\n\n")
	f.Add("data:")
	f.Fuzz(func(t *testing.T, s string) {
		readEvents(strings.NewReader(s), func(_ string, data []byte) {
			for _, line := range bytes.Split(data, []byte("\n")) {
				if !strings.Contains(s, string(line)) {
					t.Fatalf("event data %q is not in the stream", line)
				}
			}
		})
	})
}

// FuzzRecorderGot: no message makes the recorder panic.
func FuzzRecorderGot(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"result":{"_meta":{"bench/sent":1,"bench/late":true}}}`))
	f.Add([]byte(`{"method":"notifications/progress","params":{"progressToken":1}}`))
	f.Fuzz(func(t *testing.T, msg []byte) {
		r := newRecorder()
		c := r.start(1)
		c.cancelAt = 1
		r.got(msg, 2)
		r.got(msg, 3) // an answer twice: its channel closed once
	})
}

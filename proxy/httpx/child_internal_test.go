package httpx

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
)

// TestOutStreamKeepsAnswers: for a client that does not read, server
// messages queue up to the backlog and are then dropped (reported once),
// but an answer is queued whatever the backlog, and everything queued is
// read, in order, before the end.
func TestOutStreamKeepsAnswers(t *testing.T) {
	st := newOutStream(clock.Real, 1)
	ev := bytes.Repeat([]byte("n"), 1<<20)
	reported := 0
	for range streamBacklog/len(ev) + 3 {
		if !st.send(ev, false) {
			reported++
		}
	}
	sent := len(st.queue)
	if sent != streamBacklog/len(ev) || reported != 1 {
		t.Fatalf("queued %d notifications, reported %d drops; want %d and 1", sent, reported, streamBacklog/len(ev))
	}
	if !st.send([]byte("answer"), true) {
		t.Fatal("an answer was refused")
	}
	st.End()
	got, err := io.ReadAll(st)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != sent*len(ev)+len("answer") || !bytes.HasSuffix(got, []byte("answer")) {
		t.Errorf("read %d bytes ending %q", len(got), got[max(0, len(got)-10):])
	}
}

// TestOutStreamStates: a line session's stream moves forward only: in its
// grace it still takes the server's messages (its cancels of nested
// requests), the grace's end ends it, what was queued is read first, and
// a stream already ended starts no grace.
func TestOutStreamStates(t *testing.T) {
	c := clock.NewFake(time.Unix(0, 0))
	st := newOutStream(c, 1)
	st.endAfter(time.Second)
	if st.state != streamGrace || st.Ended() {
		t.Fatalf("state %d after endAfter, want grace", st.state)
	}
	st.endAfter(time.Hour) // a second cancel does not restart the grace
	st.send([]byte("nested cancel"), false)
	c.Advance(time.Second)
	if !st.Ended() {
		t.Fatal("the grace did not end the stream")
	}
	if n := c.Pending(); n != 0 {
		t.Errorf("%d timers left", n)
	}
	st.send([]byte("after the end"), false)
	if got, _ := io.ReadAll(st); string(got) != "nested cancel" {
		t.Errorf("read %q, want what came in the grace only", got)
	}
	ended := newOutStream(c, 1)
	ended.End()
	ended.endAfter(time.Second)
	if ended.state != streamEnded || c.Pending() != 0 {
		t.Errorf("an ended stream went back to grace (state %d) or armed a timer", ended.state)
	}
}

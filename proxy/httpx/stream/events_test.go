package stream

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/conntest"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/joinwrite"
)

// TestEventsHoldsWhileQueued: a line session's stream, read as fasthttp
// does (a Read, then a write of what it returned), joins the writes of the
// events queued together and the body's end; an event with nothing queued
// after it goes out before Read waits for more.
func TestEventsHoldsWhileQueued(t *testing.T) {
	rec := &conntest.Recorder{}
	st := NewEvents(clock.Real, 1)
	st.out = joinwrite.New(rec)
	st.SendEvent([]byte("e1"), false)
	st.SendEvent([]byte("e2"), true)
	st.End()
	p := make([]byte, 64)
	for {
		n, err := st.Read(p)
		if err != nil {
			break
		}
		st.out.Write(p[:n])
	}
	if got := rec.Took(); got != "" {
		t.Fatalf("wrote %q before the body's end", got)
	}
	st.out.Write([]byte("end"))
	if got := rec.Took(); got != "e1e2|end" {
		t.Fatalf("wrote %q, want the events held together, then the end", got)
	}

	rec.Wrote = make(chan string, 4)
	st = NewEvents(clock.Real, 1)
	st.out = joinwrite.New(rec)
	st.SendEvent([]byte("progress"), false)
	n, _ := st.Read(p)
	st.out.Write(p[:n])
	done := make(chan error)
	go func() {
		_, err := st.Read(p) // nothing queued: releases, then waits
		done <- err
	}()
	if got := <-rec.Wrote; got != "progress" {
		t.Fatalf("wrote %q, want the progress before the wait", got)
	}
	st.End()
	if err := <-done; err != io.EOF {
		t.Fatalf("Read: %v, want EOF at the end", err)
	}
}

// TestEventsNeverLosesItsLastEvent: an answer queued just before its
// stream ends is read before the end, however the reader's wait and the
// router's send and end interleave (the reader once saw the queue empty,
// then the end, and lost the answer queued between the two).
func TestEventsNeverLosesItsLastEvent(t *testing.T) {
	for i := range 20000 {
		st := NewEvents(clock.Real, 1)
		go func() {
			st.Send([]byte("answer"), true)
			st.Settle()
			st.Answered()
		}()
		got, err := io.ReadAll(st)
		if err != nil || !bytes.Contains(got, []byte("answer")) {
			t.Fatalf("round %d: read %q (%v), want the answer before the end", i, got, err)
		}
	}
}

// TestEventsKeepsAnswers: for a client that does not read, server
// messages queue up to the backlog and are then dropped (reported once),
// but an answer is queued whatever the backlog, and everything queued is
// read, in order, before the end.
func TestEventsKeepsAnswers(t *testing.T) {
	st := NewEvents(clock.Real, 1)
	ev := bytes.Repeat([]byte("n"), 1<<20)
	reported := 0
	for range Backlog/len(ev) + 3 {
		if !st.SendEvent(ev, false) {
			reported++
		}
	}
	sent := len(st.queue)
	if sent != Backlog/len(ev) || reported != 1 {
		t.Fatalf("queued %d notifications, reported %d drops; want %d and 1", sent, reported, Backlog/len(ev))
	}
	if !st.SendEvent([]byte("answer"), true) {
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

// TestEventsStates: a line session's stream moves forward only: in its
// grace it still takes the server's messages (its cancels of nested
// requests), the grace's end ends it, what was queued is read first, and
// a stream already ended starts no grace.
func TestEventsStates(t *testing.T) {
	c := clock.NewFake(time.Unix(0, 0))
	st := NewEvents(c, 1)
	st.EndAfter(time.Second)
	if st.state != grace || st.Ended() {
		t.Fatalf("state %d after endAfter, want grace", st.state)
	}
	st.EndAfter(time.Hour) // a second cancel does not restart the grace
	st.SendEvent([]byte("nested cancel"), false)
	c.Advance(time.Second)
	if !st.Ended() {
		t.Fatal("the grace did not end the stream")
	}
	if n := c.Pending(); n != 0 {
		t.Errorf("%d timers left", n)
	}
	st.SendEvent([]byte("after the end"), false)
	if got, _ := io.ReadAll(st); string(got) != "nested cancel" {
		t.Errorf("read %q, want what came in the grace only", got)
	}
	done := NewEvents(c, 1)
	done.End()
	done.EndAfter(time.Second)
	if done.state != ended || c.Pending() != 0 {
		t.Errorf("an ended stream went back to grace (state %d) or armed a timer", done.state)
	}
}

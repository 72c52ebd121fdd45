package httpx

import (
	"bytes"
	"io"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/conntest"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/httpx/joinwrite"
)

// TestOutStreamHoldsWhileQueued: a line session's stream, read as fasthttp
// does (a Read, then a write of what it returned), joins the writes of the
// events queued together and the body's end; an event with nothing queued
// after it goes out before Read waits for more.
func TestOutStreamHoldsWhileQueued(t *testing.T) {
	rec := &conntest.Recorder{}
	st := newOutStream(clock.Real, 1)
	st.out = joinwrite.New(rec)
	st.send([]byte("e1"), false)
	st.send([]byte("e2"), true)
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
	st = newOutStream(clock.Real, 1)
	st.out = joinwrite.New(rec)
	st.send([]byte("progress"), false)
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

// TestOutStreamNeverLosesItsLastEvent: an answer queued just before its
// stream ends is read before the end, however the reader's wait and the
// router's send and end interleave (the reader once saw the queue empty,
// then the end, and lost the answer queued between the two).
func TestOutStreamNeverLosesItsLastEvent(t *testing.T) {
	for i := range 20000 {
		st := newOutStream(clock.Real, 1)
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

package wire

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func frame(s string) *Buf {
	b := GetBuf()
	b.B = append(b.B, s...)
	return b
}

// TestOutboxFlushPartialWriteKeepsFraming: a frame larger than the pipe is
// flushed by its sender as far as it fits, without blocking; an urgent frame
// sent meanwhile must still come after the whole of it. (On the portable
// path the Outbox's goroutine writes it all: the same must hold.)
func TestOutboxFlushPartialWriteKeepsFraming(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	o := NewOutbox(w)
	if o.raw == nil && hasWritev {
		t.Fatal("os.Pipe's write end is not seen as non-blocking")
	}
	big := strings.Repeat("x", 1<<20) // far more than a pipe holds
	sent := make(chan struct{})
	go func() {
		o.SendDeferred(frame(big))
		o.Flush() // must return without anyone reading
		o.SendUrgent(frame("urgent"))
		o.Send(frame("last"))
		o.Close()
		close(sent)
	}()
	select {
	case <-sent:
	case <-time.After(10 * time.Second):
		t.Fatal("send blocked on a peer that does not read")
	}
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	<-o.dead
	want := big + "\nurgent\nlast\n"
	if !hasWritev && bytes.HasPrefix(got, []byte("urgent\n")) {
		// On the portable path the goroutine may not have begun the big
		// frame when the urgent one came: it then goes first, whole.
		want = "urgent\n" + big + "\nlast\n"
	}
	if !bytes.Equal(got, []byte(want)) {
		t.Errorf("peer read %d bytes, want %d in order big, urgent, last", len(got), len(want))
	}
}

// TestAFrameTheWriteTookNothingOfIsStillWithdrawn: a flush offers a
// request queued behind a frame larger than the pipe to the same write;
// the pipe takes part of the first and none of it, so its cancel still
// withdraws it, and the peer never reads it. Before, a frame once offered
// counted as being written, and the cancel went after it.
func TestAFrameTheWriteTookNothingOfIsStillWithdrawn(t *testing.T) {
	if !hasWritev {
		t.Skip("the portable path offers a frame to a write only as it writes it")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	o := NewOutbox(w)
	big := strings.Repeat("x", 1<<20) // far more than a pipe holds
	o.SendNow(frame(big))
	queued := o.SendNow(frame("request"))
	// A flush's write, without its hand-over to the writer goroutine
	// (which would offer the frames again meanwhile): both are offered,
	// part of the first goes, none of the second.
	batch, _ := o.takeOwn()
	rest, err := o.writev(batch, false)
	if err != nil || len(rest) != 2 {
		t.Fatalf("the write: %d frames left, %v; want both, part of the first written", len(rest), err)
	}
	if !queued.Withdraw() {
		t.Fatal("a frame nothing of which was written could not be withdrawn")
	}
	o.putBack(rest)
	o.mu.Lock()
	o.busy = false
	o.mu.Unlock()
	o.Close() // the writer goroutine writes the rest of the first
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	<-o.dead
	if want := big + "\n"; string(got) != want {
		t.Errorf("peer read %d bytes, want the first frame alone (%d)", len(got), len(want))
	}
}

// TestOutboxQueuedPathOrder covers a plain writer (no inline writes).
func TestOutboxQueuedPathOrder(t *testing.T) {
	r, w := io.Pipe()
	o := NewOutbox(w)
	if o.raw != nil {
		t.Fatal("io.Pipe seen as a file")
	}
	go func() {
		for _, f := range []string{"a", "b", "c"} {
			o.Send(frame(f))
		}
		o.Close()
	}()
	got, _ := io.ReadAll(r)
	if string(got) != "a\nb\nc\n" {
		t.Errorf("got %q", got)
	}
}

// TestOutboxStartsNoGoroutineWhileThePeerKeepsUp: frames a flush writes
// whole (a stdio server's pipe with room) start no goroutine: the
// Outbox's own starts the first time a write does not fit, or a frame is
// sent rather than flushed, or at Close.
func TestOutboxStartsNoGoroutineWhileThePeerKeepsUp(t *testing.T) {
	if !hasWritev {
		t.Skip("without writev the Outbox's goroutine writes every frame")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	before := goleak.IgnoreCurrent()
	o := NewOutbox(w)
	for _, f := range []string{"a", "b"} {
		o.SendDeferred(frame(f))
	}
	o.Flush()
	if err := goleak.Find(before); err != nil {
		t.Errorf("a goroutine runs though the peer took every frame at once: %v", err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(r, got); err != nil || string(got) != "a\nb\n" {
		t.Errorf("the peer read %q, %v", got, err)
	}
	o.Close()
	<-o.Dead()
}

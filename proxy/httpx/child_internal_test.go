package httpx

import (
	"bytes"
	"io"
	"slices"
	"testing"
)

// TestOutStreamKeepsAnswers: for a client that does not read, server
// messages queue up to the backlog and are then dropped (reported once),
// but an answer is queued whatever the backlog, and everything queued is
// read, in order, before the end.
func TestOutStreamKeepsAnswers(t *testing.T) {
	st := newOutStream(1)
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
	st.close()
	got, err := io.ReadAll(st)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != sent*len(ev)+len("answer") || !bytes.HasSuffix(got, []byte("answer")) {
		t.Errorf("read %d bytes ending %q", len(got), got[max(0, len(got)-10):])
	}
}

func TestLineSplitter(t *testing.T) {
	var l lineSplitter
	var got []string
	send := func(line []byte) bool { got = append(got, string(line)); return len(got) < 4 }
	l.split([]byte("a\nb"), send)
	l.split([]byte("c\n\n \r\nd"), send)
	l.split([]byte("\ne\nf\n"), send)
	if want := []string{"a", "bc", "d", "e"}; !slices.Equal(got, want) {
		t.Errorf("lines %q, want %q (blank lines skipped, stopped when send said so)", got, want)
	}
}

package stdio_test

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/stdio"
)

// drain reads every frame until Next fails, and returns them with the error.
func drain(f *stdio.Frames) ([]string, error) {
	var got []string
	for {
		frame, err := f.Next(nil)
		if err != nil {
			return got, err
		}
		got = append(got, string(frame))
	}
}

// TestFramesCarryWholeMessages: frames put and lines written come out
// whole and in order, blank ones skipped and a line cut over two writes
// joined; CloseWrite lets the reader finish what is queued, Close drops it.
func TestFramesCarryWholeMessages(t *testing.T) {
	f := stdio.NewFrames()
	f.Put([]byte(`{"a":1}`))
	f.Put([]byte("  "))
	f.Write([]byte("{\"b\":2}\n\n{\"c\""))
	f.Write([]byte(":3}\n{\"d\":4}")) // the last has no newline yet
	f.CloseWrite()
	if err := f.Put([]byte("late")); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("Put after CloseWrite: %v, want io.ErrClosedPipe", err)
	}
	got, err := drain(f)
	if want := []string{`{"a":1}`, `{"b":2}`, `{"c":3}`}; strings.Join(got, " ") != strings.Join(want, " ") || err != io.EOF {
		t.Errorf("read %q, %v; want %q, EOF", got, err, want)
	}

	f = stdio.NewFrames()
	f.Put([]byte("dropped"))
	f.Close()
	if got, err := drain(f); len(got) != 0 || err != io.EOF {
		t.Errorf("after Close: read %q, %v; want nothing, EOF", got, err)
	}
	if _, err := f.Write([]byte("x\n")); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("Write after Close: %v, want io.ErrClosedPipe", err)
	}
}

// TestFramesWakeTheReader: a reader waiting for a frame gets the one put
// by another goroutine, and EOF once the writer ends, and reading bytes
// gives each frame with its newline.
func TestFramesWakeTheReader(t *testing.T) {
	f := stdio.NewFrames()
	done := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(f)
		done <- b
	}()
	f.Put([]byte("one"))
	f.Write([]byte("two\n"))
	f.CloseWrite()
	if got := string(<-done); got != "one\ntwo\n" {
		t.Errorf("read %q, want %q", got, "one\ntwo\n")
	}
}

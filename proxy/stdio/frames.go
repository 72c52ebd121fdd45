package stdio

import (
	"bytes"
	"io"
	"sync"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// Frames is a queue of whole messages, one direction of a peer: what a
// Conn of Lines brings before its session asks to be handed them (Take),
// and, for a reader of bytes (the check command), its lines (Read). Its
// producer never waits for the reader. One goroutine reads; any may
// write.
type Frames struct {
	mu    sync.Mutex
	q     [][]byte // frames, oldest first; those from head on are not yet read
	head  int
	lines framing.LineSplitter // Write's
	rest  []byte               // Read's part of a frame not yet read
	wake  chan struct{}        // the reader waits on it; one token at most
	// ended: no frame comes after those queued (CloseWrite); aborted: the
	// reader is gone, and nothing queued is read (Close).
	ended, aborted bool
}

// maxKeptFrames bounds the queue's array kept for reuse once read.
const maxKeptFrames = 64

// NewFrames returns an empty, open Frames.
func NewFrames() *Frames { return &Frames{wake: make(chan struct{}, 1)} }

// Put queues one frame (without its newline), which Frames now owns; a
// blank one is dropped, as a reader of lines skips a blank line. It
// returns io.ErrClosedPipe once the Frames has been closed either way.
func (f *Frames) Put(frame []byte) error {
	if len(bytes.TrimSpace(frame)) == 0 {
		return nil
	}
	f.mu.Lock()
	if f.ended || f.aborted {
		f.mu.Unlock()
		return io.ErrClosedPipe
	}
	f.q = append(f.q, frame)
	f.mu.Unlock()
	f.signal()
	return nil
}

// Write queues each whole, non-blank line of p (copied), keeping the start
// of a line that p does not end for the next Write.
func (f *Frames) Write(p []byte) (int, error) {
	f.mu.Lock()
	if f.ended || f.aborted {
		f.mu.Unlock()
		return 0, io.ErrClosedPipe
	}
	f.lines.Split(p, func(line []byte) bool {
		f.q = append(f.q, bytes.Clone(line))
		return true
	})
	f.mu.Unlock()
	f.signal()
	return len(p), nil
}

func (f *Frames) signal() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// Next returns the next frame, waiting for one; io.EOF once the Frames
// has ended and every frame was read, or at once after Close. The frame is
// the reader's (buf is not used: the frame's own bytes are returned).
func (f *Frames) Next([]byte) ([]byte, error) {
	for {
		f.mu.Lock()
		switch {
		case f.aborted:
			f.mu.Unlock()
			return nil, io.EOF
		case f.head < len(f.q):
			frame := f.q[f.head]
			f.q[f.head] = nil
			if f.head++; f.head == len(f.q) { // all read: the array is used again, unless a burst made it big
				f.q, f.head = f.q[:0], 0
				if cap(f.q) > maxKeptFrames {
					f.q = nil
				}
			}
			f.mu.Unlock()
			return frame, nil
		case f.ended:
			f.mu.Unlock()
			return nil, io.EOF
		}
		f.mu.Unlock()
		<-f.wake
	}
}

// Take returns the frames queued and not yet read, which are then the
// caller's: for a writer that hands the frames to their reader itself
// from now on.
func (f *Frames) Take() [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.q[f.head:]
	f.q, f.head = nil, 0
	return q
}

// Read implements io.Reader for a reader that wants bytes: the frames,
// each ended by a newline.
func (f *Frames) Read(p []byte) (int, error) {
	if len(f.rest) == 0 {
		frame, err := f.Next(nil)
		if err != nil {
			return 0, err
		}
		f.rest = append(frame, '\n')
	}
	n := copy(p, f.rest)
	f.rest = f.rest[n:]
	return n, nil
}

// CloseWrite says no frame comes after those queued: Next returns them,
// then io.EOF.
func (f *Frames) CloseWrite() error {
	f.mu.Lock()
	f.ended = true
	f.mu.Unlock()
	f.signal()
	return nil
}

// Close is the reader's: it stops reading, and what is queued, or put
// later, is dropped. A Session closes its client's In this way when it
// ends.
func (f *Frames) Close() error {
	f.mu.Lock()
	f.aborted = true
	f.q, f.head = nil, 0
	f.mu.Unlock()
	f.signal()
	return nil
}

package events

import (
	"os"
	"sync"
	"sync/atomic"
)

// maxPending bounds the lines published but not yet written to the file;
// a publisher past it waits for the writer (a disk that stopped), as a
// write of its own would, so that no line is lost.
const maxPending = 1 << 20

// fileWriter appends the feed's lines to its file from a goroutine of its
// own, so that an event costs the code that says it (a cancel being
// accepted, before it is forwarded) no write to the disk: about 35 µs at
// p50 on the 2-core machine, a fifth of a cancel's way through the
// wrapper (bench/cancel). Lines are written in the order published,
// batched when they come faster than the disk takes them. The feed's
// mutex guards pending, spare and closing.
type fileWriter struct {
	f       *os.File
	mu      *sync.Mutex // the feed's
	room    sync.Cond   // signalled when pending is taken
	pending []byte
	spare   []byte // the buffer last written, reused
	closing bool
	kick    chan struct{} // 1-buffered: lines are pending
	done    chan struct{} // closed when run returns
	dropped *atomic.Int64
	err     error // the file's close error, read after done
}

func newFileWriter(f *os.File, mu *sync.Mutex, dropped *atomic.Int64) *fileWriter {
	w := &fileWriter{f: f, mu: mu, kick: make(chan struct{}, 1), done: make(chan struct{}), dropped: dropped}
	w.room.L = mu
	go w.run() // stopped by closeLocked
	return w
}

// addLocked queues a line; the feed's mutex is held.
func (w *fileWriter) addLocked(line []byte) {
	for len(w.pending) > maxPending && !w.closing {
		w.room.Wait()
	}
	w.pending = append(w.pending, line...)
	select {
	case w.kick <- struct{}{}:
	default: // the writer is awake
	}
}

// run writes what is pending until the feed closes, then the rest, and
// closes the file.
func (w *fileWriter) run() {
	defer close(w.done)
	for range w.kick {
		w.mu.Lock()
		batch, closing := w.pending, w.closing
		w.pending, w.spare = w.spare[:0], nil
		w.room.Broadcast()
		w.mu.Unlock()
		if len(batch) > 0 {
			if _, err := w.f.Write(batch); err != nil {
				w.dropped.Add(1)
			}
		}
		w.mu.Lock()
		w.spare = batch[:0]
		w.mu.Unlock()
		if closing {
			w.err = w.f.Close()
			return
		}
	}
}

// closeLocked writes every line queued, closes the file and returns its
// error; the feed's mutex is held, and released while it waits.
func (w *fileWriter) closeLocked() error {
	w.closing = true
	w.room.Broadcast()
	select {
	case w.kick <- struct{}{}:
	default:
	}
	w.mu.Unlock()
	<-w.done
	w.mu.Lock()
	return w.err
}

package wire

import (
	"io"
	"sync"
	"syscall"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// maxQueued bounds the memory queued toward one peer, counted as the
// capacity of the frames' buffers. When the peer stops reading, the queue
// fills and the relay pushes back on the sender. A single frame larger than
// this is still accepted when the queue is empty.
const maxQueued = 4 << 20

// Outbox owns the writing side of one peer.
//
// Frames are queued under a mutex. The relay that produced them writes them
// itself when its input runs dry (flush): one writev for the whole burst,
// attempted without blocking, as a plain byte copy would. What does not fit,
// and frames queued by anyone else, are written by the Outbox's goroutine,
// which is the only one that ever waits for the peer: a relay never blocks
// on a peer that does not read, so it keeps reading, and acting on, cancels.
// That goroutine starts the first time it has work, so that a peer that
// always takes what it is sent at once (a stdio server's pipe) never costs
// one.
// Urgent frames (cancels whose request has already been written) go ahead of
// everything queued, so that a cancel never waits behind other frames.
//
// Writers that are not non-blocking files (an io.Pipe in tests, a terminal,
// and every writer on the platforms without writev, or built with the tag
// portable) get the same queue, written by the goroutine alone: the same
// ordering and withdraw rules, one write per frame.
type Outbox struct {
	w      io.Writer
	c      io.Closer
	raw    syscall.RawConn // set when the peer is a non-blocking file
	vec    vectors         // writev's state; used only by whoever holds busy
	gather []byte          // the portable path's write buffer; likewise
	taken  []*Buf          // flush's batch; likewise

	mu sync.Mutex // guards the fields below
	// front holds frames taken for a write that did not finish, the first
	// of them possibly in part; they go before everything else. urgent and
	// queue hold frames not yet taken, in order.
	front, urgent, queue []*Buf
	queued               int       // buffer capacity held by front, urgent and queue
	busy                 bool      // someone is writing to the peer
	closing              bool      // close was called: drain, then stop
	stopped              bool      // the writer has returned; sends are refused
	space                sync.Cond // signalled when frames are taken, or on stop

	// deliver, when set, takes each frame whole, with the request it is
	// about, in place of w (Options.Deliver): handed over by whoever queued
	// the frames (drain), the relay that produced them when its input runs
	// dry (flush), as a writev would be written. A front's Deliver never
	// blocks, so such an Outbox has no goroutine: run is not started.
	deliver Deliver
	// sender, when set, takes each frame for the server whole, with the
	// request it opens or cancels, in place of w (a Sender): written by
	// the goroutine alone.
	sender Sender
	// hands says the frames are handed over by whoever queues them (a
	// front, deliver), as drain does: there is no goroutine, and no wait
	// for space.
	hands bool

	started sync.Once     // starts run, the first time there is work for it
	kick    chan struct{} // 1-buffered: wakes the writer goroutine
	dead    chan struct{} // closed when run returns
	err     error         // the write error that stopped run, if any; read after dead
}

// NewOutbox returns an Outbox that writes to w (and closes it once
// stopped). It starts no goroutine until it has something to write.
func NewOutbox(w io.WriteCloser) *Outbox {
	o := &Outbox{w: w, c: w, kick: make(chan struct{}, 1), dead: make(chan struct{})}
	if s, ok := w.(Sender); ok {
		o.sender = s
	} else {
		o.raw = nonBlocking(w)
	}
	o.space.L = &o.mu
	return o
}

// HandTo has the Outbox hand each frame to d whole in place of writing
// it (a front that takes its client's frames itself): whoever queues a
// frame hands it over (drain), so such an Outbox runs no goroutine. It is
// called before anything is queued.
func (o *Outbox) HandTo(d Deliver) { o.deliver, o.hands = d, true }

// TakesMessages reports whether the Outbox's peer takes each frame whole
// with the request it opens or cancels (a Sender), to which a frame's
// parsed message (Buf.Msg) is worth keeping.
func (o *Outbox) TakesMessages() bool { return o.sender != nil }

// Dead is closed once the Outbox has stopped: after Close, everything
// queued written (or handed over), or at the first write error.
func (o *Outbox) Dead() <-chan struct{} { return o.dead }

// Send queues a frame and wakes the writer; the Outbox takes ownership of b.
// It blocks while the queue is full. When the Outbox has stopped, b is freed
// and the Ticket is invalid.
func (o *Outbox) Send(b *Buf) Ticket {
	t := o.enqueue(b, false)
	o.wake()
	return t
}

// SendDeferred queues a frame without waking the writer: the caller
// promises to call flush before it next waits for input.
func (o *Outbox) SendDeferred(b *Buf) Ticket { return o.enqueue(b, false) }

// SendUrgent queues a frame ahead of every frame not yet being written,
// and writes the queue at once, in the caller's goroutine, as flush does
// (what does not fit goes to the writer goroutine). Waking the writer
// instead handed a cancel to another goroutine, and often another thread,
// where a plain notification, flushed by its relay, went at once
// (bench/cancel). It never waits for space: urgent frames are small and
// rare.
func (o *Outbox) SendUrgent(b *Buf) Ticket {
	t := o.enqueue(b, true)
	o.Flush()
	return t
}

// SendNow queues a frame, in order, without waiting for space: for a
// front's frames (Session.Submit), decided under the session's lock,
// which a peer that does not read must not hold for ever; what an HTTP
// body brings is bounded by its size. Like SendDeferred it leaves the
// write to the caller's Flush (Submit's, once the frame is decided), so
// that a peer that takes it at once costs no goroutine.
func (o *Outbox) SendNow(b *Buf) Ticket { return o.put(b, false, false) }

// SendAs is SendNow when now, else SendDeferred.
func (o *Outbox) SendAs(b *Buf, now bool) Ticket {
	if now {
		return o.SendNow(b)
	}
	return o.SendDeferred(b)
}

func (o *Outbox) enqueue(b *Buf, urgent bool) Ticket { return o.put(b, urgent, !urgent) }

// put queues b, ahead of the queue if urgent, first waiting for space if
// wait.
func (o *Outbox) put(b *Buf, urgent, wait bool) Ticket {
	b.B = append(b.B, '\n')
	gen := b.st.Load() >> 2
	b.st.Store(gen<<2 | bufQueued)
	o.mu.Lock()
	defer o.mu.Unlock()
	for wait && !o.hands && !o.stopped && o.queued > 0 && o.queued+cap(b.B) > maxQueued {
		o.wakeLocked()
		o.space.Wait()
	}
	if o.stopped {
		PutBuf(b)
		return Ticket{}
	}
	if urgent {
		o.urgent = append(o.urgent, b)
	} else {
		o.queue = append(o.queue, b)
	}
	o.queued += cap(b.B)
	return Ticket{b, gen}
}

// wake has what is queued written: handed over at once (hands), or by
// the goroutine, started if it was not yet.
func (o *Outbox) wake() {
	if o.hands {
		o.drain()
		return
	}
	o.started.Do(func() { go o.run() })
	select {
	case o.kick <- struct{}{}:
	default: // already awake, or about to be
	}
}

// wakeLocked wakes the writer from under the lock (the send never
// blocks); a front's Outbox (deliver) never waits for space, so it is
// never woken so.
func (o *Outbox) wakeLocked() {
	if !o.hands {
		o.wake()
	}
}

// Flush writes what is queued, in the caller's goroutine, with a single
// non-blocking attempt, and leaves what did not fit to the writer goroutine;
// a front that takes frames (deliver) gets them all, at once.
func (o *Outbox) Flush() {
	if o.raw == nil || o.hands {
		o.wake()
		return
	}
	batch, ok := o.takeOwn()
	if !ok {
		return // the writer goroutine is at it, and will loop for more
	}
	if len(batch) > 0 {
		rest, err := o.writev(batch, false)
		o.putBack(rest)
		if err != nil {
			o.wake() // the writer goroutine meets the error again and stops
		}
	}
	clear(batch)
	o.taken = batch[:0] // the next flush's, once it is busy
	o.mu.Lock()
	o.busy = false
	pending := o.queued > 0 || o.closing
	o.mu.Unlock()
	if pending {
		o.wake()
	}
}

// drain hands every frame queued over (to a front, deliver), in the
// caller's goroutine, until none is left, or until it finds another caller
// at it, which then loops for more: one caller at a time, in order. Once close was called and nothing is left,
// it stops the Outbox and closes its writer, if it has one.
func (o *Outbox) drain() {
	for {
		batch, ok := o.takeOwn()
		if !ok {
			return
		}
		o.writeAll(batch) // deliver does not block
		clear(batch)
		o.taken = batch[:0] // the next one's, once it is busy
		o.mu.Lock()
		o.busy = false
		more := o.queued > 0
		done := o.closing && !more && !o.stopped
		if done {
			o.stopLocked()
		}
		o.mu.Unlock()
		if done {
			if o.c != nil {
				o.c.Close()
			}
			close(o.dead)
		}
		if !more {
			return
		}
	}
}

// Close asks the Outbox to write what is queued, close its writer and stop.
// It does not wait; receive from dead for that.
func (o *Outbox) Close() {
	o.mu.Lock()
	o.closing = true
	o.mu.Unlock()
	o.wake()
}

// run is the Outbox's goroutine, started the first time it has work
// (wake). It exits after close (once everything queued is written) or on
// the first write error, and closes the writer, if it has one (a client's
// front that takes its frames, deliver, has none).
func (o *Outbox) run() {
	defer close(o.dead)
	if o.c != nil {
		defer o.c.Close()
	}
	defer o.stop()
	var batch []*Buf
	for range o.kick {
		for {
			var ok bool
			batch, ok = o.take(batch[:0])
			if !ok { // a flush is under way; it wakes us when done
				break
			}
			if len(batch) == 0 {
				o.mu.Lock()
				o.busy = false
				closing := o.closing && o.queued == 0
				o.mu.Unlock()
				if closing {
					return
				}
				break
			}
			if o.err = o.writeAll(batch); o.err != nil {
				return
			}
			o.mu.Lock()
			o.busy = false
			o.mu.Unlock()
		}
	}
}

// take marks the Outbox busy and moves every frame into batch: front,
// then urgent, then the queue. It reports false if someone else is writing.
func (o *Outbox) take(batch []*Buf) ([]*Buf, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.busy {
		return batch, false
	}
	return o.takeLocked(batch), true
}

// takeOwn is take into the Outbox's own batch (taken), which only the one
// that is busy uses: for flush and drain, which any goroutine may call.
func (o *Outbox) takeOwn() ([]*Buf, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.busy {
		return nil, false
	}
	return o.takeLocked(o.taken[:0]), true
}

func (o *Outbox) takeLocked(batch []*Buf) []*Buf {
	o.busy = true
	batch = append(append(append(batch, o.front...), o.urgent...), o.queue...)
	clear(o.front)
	clear(o.urgent)
	clear(o.queue)
	o.front, o.urgent, o.queue, o.queued = o.front[:0], o.urgent[:0], o.queue[:0], 0
	o.space.Broadcast()
	return batch
}

// putBack returns frames a flush could not finish to the front.
func (o *Outbox) putBack(rest []*Buf) {
	if len(rest) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.front = append(o.front, rest...)
	for _, b := range rest {
		o.queued += cap(b.B)
	}
}

// stop refuses further sends and frees anything left queued.
func (o *Outbox) stop() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.stopLocked()
}

func (o *Outbox) stopLocked() {
	o.stopped = true
	for _, q := range [][]*Buf{o.front, o.urgent, o.queue} {
		for _, b := range q {
			PutBuf(b)
		}
	}
	o.front, o.urgent, o.queue = nil, nil, nil
	o.space.Broadcast()
}

// writeAll writes a batch, waiting for the peer as long as it takes.
func (o *Outbox) writeAll(batch []*Buf) error {
	if o.deliver != nil || o.sender != nil {
		for _, b := range batch {
			if !claim(b) {
				PutBuf(b)
				continue
			}
			o.handOver(b)
			written(b)
		}
		return nil
	}
	if o.raw != nil {
		_, err := o.writev(batch, true)
		return err
	}
	// Without writev, small frames are gathered into one write, as writev
	// would; a large one goes on its own. A frame is claimed (no longer
	// withdrawable) only as it joins a write.
	var err error
	pending := batch[:0]
	flush := func() {
		if len(o.gather) > 0 && err == nil {
			_, err = o.w.Write(o.gather)
		}
		o.gather = o.gather[:0]
		for _, b := range pending {
			if err == nil {
				written(b)
			} else {
				PutBuf(b)
			}
		}
		pending = pending[:0]
	}
	for _, b := range batch {
		switch {
		case err != nil || !claim(b):
			PutBuf(b)
		case len(b.B)-b.sent > gatherMax:
			flush()
			if err == nil {
				_, err = o.w.Write(b.B[b.sent:])
			}
			if err == nil {
				written(b)
			} else {
				PutBuf(b)
			}
		default:
			if len(o.gather)+len(b.B)-b.sent > gatherMax {
				flush()
			}
			o.gather = append(o.gather, b.B[b.sent:]...)
			pending = append(pending, b)
		}
	}
	flush()
	return err
}

// gatherMax bounds the frames gathered into one write on the portable path.
const gatherMax = 64 << 10

// claim marks a queued frame as being written and reports true, or reports
// whether a frame already being written has bytes left; a withdrawn frame
// reports false.
func claim(b *Buf) bool {
	v := b.st.Load()
	if v&stateMask == bufWriting {
		return b.sent < len(b.B)
	}
	gen := v >> 2
	return b.st.CompareAndSwap(gen<<2|bufQueued, gen<<2|bufWriting)
}

// Deliver takes one frame for the client (without a newline; it is the
// session's buffer, valid until Deliver returns: what Deliver keeps, it
// copies, as a stream's event does) with the request of the client's it is about, and whether it is that
// request's last message: the server's answer, or the proxy's in its
// place; about is nil for other traffic (the server's own requests and
// notifications). An empty frame says only that about has ended: the
// server's batch that ended it went as about another request. It is called
// by one goroutine at a time (the one that read the server's frames, or the
// session's writer), in order, and must not block.
type Deliver func(frame []byte, about *proxy.Call, last bool)

// Sender is a server reached message by message (an upstream.Conn): a
// server's Out that implements it takes each frame whole, without its
// newline, with the request it opens, or, for an accepted cancel, the
// request it cancels, in place of bytes. Each is called by one goroutine,
// in the order the frames were decided (urgent cancels first, as ever),
// and must not keep frame.
type Sender interface {
	// SendFrame sends a frame; opens is the request it opens, if any, and
	// m, if not nil, is the frame parsed.
	SendFrame(frame []byte, opens *proxy.Call, m *framing.Message)
	// SendCancel carries the accepted cancel of c, whose notice is the
	// frame the server is to see.
	SendCancel(c *proxy.Call, notice []byte)
}

// handOver hands b, claimed, whole and without its newline, to whoever
// takes frames one by one: the client's front (deliver), or a server that
// takes messages (sender).
func (o *Outbox) handOver(b *Buf) {
	frame := b.B[b.sent : len(b.B)-1]
	switch {
	case o.deliver != nil:
		o.deliver(frame, b.About, b.Last) // valid until it returns: no copy
	case b.Cancels != nil:
		o.sender.SendCancel(b.Cancels, frame)
	case b.HasMsg:
		o.sender.SendFrame(frame, b.Opens, &b.Msg)
	default:
		o.sender.SendFrame(frame, b.Opens, nil)
	}
}

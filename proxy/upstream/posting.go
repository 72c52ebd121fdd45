package upstream

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
)

// TakenInWait bounds how long a cancel waits, once its request has been
// written whole to its connection, for a sign that the server has taken
// the request in: its answer's headers. The TypeScript and Python SDKs'
// servers send those as soon as they take a request in, so a cancel of
// theirs goes at once; the go-sdk's and mcp-go's send them only with the
// first event or the answer, so for a call that is silent until done,
// this bound is what keeps the cancel from racing its request inside the
// server (a cancel read before its request is dropped there as naming
// nothing). Only the cancel waits: no other message is held for it.
const TakenInWait = 100 * time.Millisecond

// Posting is how far the POST of a client's request has gone toward a
// Streamable HTTP server, for the cancel that may follow it: written once
// the request has been written whole to its connection (it is the
// request's body, Request.Posting, and fasthttp closes it then) or has
// failed without being written; headed once its answer's headers have
// come, or it has failed, or it will never be sent. The zero Posting is
// one about to be sent; a nil *Posting is a request already taken in.
// It costs no allocation but its own: a channel is made only for a
// cancel that waits.
type Posting struct {
	body bytes.Reader // the request's body, as fasthttp reads it

	mu    sync.Mutex // guards the fields below
	state postingState
	sends uint32        // how often the request was set to be written anew (Rewind, hold)
	wake  chan struct{} // closed at the next change of state; made by a waiter
	// held: the POST waits for its client to sign in (AddAuth), not yet
	// written; withdrawn: its request was cancelled meanwhile, and it is
	// never sent (Withdraw).
	held, withdrawn bool
	// link is the connection the request is written to (bind), which
	// Cut closes; begun: the body started to be written; cut: Cut came,
	// and the request goes no further.
	link       *Link
	begun, cut bool
	// resp is the response the request is being sent for (Endpoint.Send),
	// whose local address leads to its connection (LinkOf). Only the
	// sending goroutine touches it.
	resp *fasthttp.Response
}

type postingState uint8

const (
	postingSending postingState = iota
	postingWritten
	postingHeaded
)

// NewPosting returns the Posting of a POST about to be sent.
func NewPosting() *Posting { return new(Posting) }

// Read implements io.Reader: the request's body.
func (p *Posting) Read(b []byte) (int, error) {
	if err := p.bind(); err != nil {
		return 0, err
	}
	return p.body.Read(b)
}

// WriteTo implements io.WriterTo: the request's body, in one write.
func (p *Posting) WriteTo(w io.Writer) (int64, error) {
	if err := p.bind(); err != nil {
		return 0, err
	}
	return p.body.WriteTo(w)
}

// errCut fails a POST cut before its body was written.
var errCut = errors.New("the request was cancelled as it was being sent")

// bind notes, as the body starts to be written, the connection it is
// written to (fasthttp has just given it to the response, ParseNetConn);
// after a Cut, it fails the write instead.
func (p *Posting) bind() error {
	if p.body.Len() != int(p.body.Size()) { // already under way
		return nil
	}
	var link *Link
	if p.resp != nil { // sent by Endpoint.Send
		link = LinkOf(p.resp)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return errCut
	}
	p.link, p.begun = link, true
	return nil
}

// WasCut reports whether Cut cut the request.
func (p *Posting) WasCut() bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// Unsent reports whether Cut came before the request's body started to be
// written, which it then never is: the server cannot have seen the
// request, nor will it hear of its cancel. Calls on nil report false.
func (p *Posting) Unsent() bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut && !p.begun
}

// Cut cancels the request by closing its connection, while the answer's
// headers have not come: in 2026-07-28 closing the request's stream is its
// cancel, and a server that sends no headers until it answers (the
// go-sdk's, mcp-go's) has no stream yet to close. A request not yet
// written is failed as it starts to be. It reports whether it cut; once
// the headers have come, the answer's body is what to close. Calls on nil
// report false.
func (p *Posting) Cut() bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == postingHeaded || p.cut {
		return false
	}
	p.cut = true
	if p.link != nil {
		p.link.Close()
	}
	return true
}

// Rewind implements keepalive.Rewinder: the body is to be written anew,
// on another connection, since its bytes did not reach the server (they
// were never written, or their write failed). It is sending again, as
// after a challenge (hold), and a cancel waiting for it waits anew.
func (p *Posting) Rewind() int {
	p.body.Seek(0, io.SeekStart)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == postingWritten {
		p.state = postingSending
		p.sends++
		p.wakeLocked()
	}
	return int(p.body.Size())
}

// Close implements io.Closer: fasthttp calls it once the body has been
// written to the connection, or when the request is released unwritten.
func (p *Posting) Close() error {
	p.advance(postingWritten)
	return nil
}

// Headed notes that the POST's answer has its headers, that the POST has
// failed, or that it will never be sent; calls after the first do
// nothing, as do calls on nil.
func (p *Posting) Headed() {
	if p != nil {
		p.advance(postingHeaded)
	}
}

// advance moves the state forward to s, waking whoever waits.
func (p *Posting) advance(s postingState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state >= s {
		return
	}
	p.state = s
	p.wakeLocked()
}

func (p *Posting) wakeLocked() {
	if p.wake != nil {
		close(p.wake)
		p.wake = nil
	}
}

// hold notes that the POST waits for a sign-in before it is written: the
// POSTs after it go on meanwhile (they wait for the same sign-in), and its
// cancel may withdraw it. A POST written once and refused for want of a
// credential (again) is to be written anew: it is sending again, the one
// way its state moves back, since the server did not take it.
func (p *Posting) hold(again bool) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = true
	if again && p.state == postingWritten {
		p.state = postingSending
		p.sends++
	}
	p.wakeLocked()
}

// unhold ends what hold began, and reports whether the POST is still to
// be sent: false if it was withdrawn meanwhile.
func (p *Posting) unhold() bool {
	if p == nil {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = false
	return !p.withdrawn
}

// Withdraw withdraws the POST if it waits for a sign-in and is not yet
// written (its request's cancel came meanwhile): it is then never sent,
// and neither is the cancel. It reports whether it did; calls on nil
// report false.
func (p *Posting) Withdraw() bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held && p.state == postingSending {
		p.withdrawn = true
	}
	return p.withdrawn
}

// now returns the state, and a channel closed when it next changes.
func (p *Posting) now() (postingState, <-chan struct{}) {
	state, _, wake := p.nowSent()
	return state, wake
}

// nowSent is now, with how often the request was set to be written anew.
func (p *Posting) nowSent() (postingState, uint32, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == postingHeaded {
		return p.state, p.sends, nil
	}
	if p.wake == nil {
		p.wake = make(chan struct{})
	}
	return p.state, p.sends, p.wake
}

// waitWritten waits until the request has been written, or has failed,
// or waits for a sign-in (the POSTs after it go on), or stop closes: then
// it reports false.
func (p *Posting) waitWritten(stop <-chan struct{}) bool { return p.waitFor(postingWritten, stop) }

// waitAnswered waits until the POST has its answer, or has failed, or
// waits for a sign-in; on nil, it returns at once.
func (p *Posting) waitAnswered() {
	if p != nil {
		p.waitFor(postingHeaded, nil)
	}
}

// waitFor waits until the POST's state is s or later, or it waits for a
// sign-in, or stop closes (nil: never): then it reports false.
func (p *Posting) waitFor(s postingState, stop <-chan struct{}) bool {
	for {
		state, changed := p.now()
		p.mu.Lock()
		held := p.held
		p.mu.Unlock()
		if state >= s || held {
			return true
		}
		select {
		case <-changed:
		case <-stop:
			return false
		}
	}
}

// BeforeCancel waits until a cancel of the POST's request may be sent:
// the request written, and then its answer's headers come or TakenInWait
// passed on clk (nil: the real clock); or until hurry closes (the session
// ends: its cancels go at once, or not at all).
func (p *Posting) BeforeCancel(clk clock.Clock, hurry <-chan struct{}) {
	if p == nil {
		return
	}
	var due <-chan struct{} // nil, and so never, until written
	var timer clock.Timer
	var timed uint32 // the write timer waits for
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		state, sends, changed := p.nowSent()
		if timer != nil && (state == postingSending || sends != timed) {
			// Rewound (a resend, a sign-in): the wait starts again with
			// the next write. Each wait's timer closes a channel of its
			// own, so a timer that fires late closes nothing another
			// wait holds.
			timer.Stop()
			due, timer = nil, nil
		}
		switch {
		case state == postingHeaded:
			return
		case state == postingWritten && timer == nil:
			d := make(chan struct{})
			due, timer, timed = d, clock.Or(clk).AfterFunc(TakenInWait, func() { close(d) }), sends
		}
		select {
		case <-changed:
		case <-due:
			return
		case <-hurry:
			return
		}
	}
}

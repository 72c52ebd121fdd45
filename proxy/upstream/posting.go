package upstream

import (
	"bytes"
	"io"
	"sync"
	"time"

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
	wake  chan struct{} // closed at the next change of state; made by a waiter
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
func (p *Posting) Read(b []byte) (int, error) { return p.body.Read(b) }

// WriteTo implements io.WriterTo: the request's body, in one write.
func (p *Posting) WriteTo(w io.Writer) (int64, error) { return p.body.WriteTo(w) }

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
	if p.wake != nil {
		close(p.wake)
		p.wake = nil
	}
}

// now returns the state, and a channel closed when it next changes.
func (p *Posting) now() (postingState, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == postingHeaded {
		return p.state, nil
	}
	if p.wake == nil {
		p.wake = make(chan struct{})
	}
	return p.state, p.wake
}

// waitWritten waits until the request has been written, or has failed, or
// stop closes: then it reports false.
func (p *Posting) waitWritten(stop <-chan struct{}) bool {
	for {
		state, changed := p.now()
		if state >= postingWritten {
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
	var due chan struct{}
	for {
		state, changed := p.now()
		switch {
		case state == postingHeaded:
			return
		case state == postingWritten && due == nil:
			due = make(chan struct{})
			t := clock.Or(clk).AfterFunc(TakenInWait, func() { close(due) })
			defer t.Stop()
		}
		select {
		case <-changed:
		case <-due: // nil, and so never, until written
			return
		case <-hurry:
			return
		}
	}
}

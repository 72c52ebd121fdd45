package strict

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Conn is a client's one connection to the proxy, initialized: every
// message it sends goes on it, every message for it comes on it, in the
// order the proxy wrote them.
type Conn interface {
	Send(frame string) error
	Recv() (map[string]any, error)
}

// Stream plays l on c, a stdio client's or an old (HTTP+SSE) client's one
// connection, and returns what it saw, or the first message a strict
// client would have closed its connection over (ErrStray).
func Stream(c Conn, l Load) (Tally, error) {
	p := &streamPlay{c: c, l: l, rng: rand.New(rand.NewPCG(l.Seed, 7)), calls: map[int]*call{}, next: 100}
	if err := p.fill(); err != nil {
		return p.got, err
	}
	for p.ended < l.Calls {
		m, err := c.Recv()
		if err != nil {
			return p.got, err
		}
		if err := p.take(m); err != nil {
			return p.got, err
		}
	}
	return p.got, p.drain()
}

// call is one call, as the client sees it.
type call struct {
	cancelled, answered, cancelOnProgress bool
}

// streamPlay is Stream's state.
type streamPlay struct {
	c     Conn
	l     Load
	rng   *rand.Rand
	calls map[int]*call
	next  int // the next call's id
	open  int // calls neither answered nor cancelled
	ended int // calls answered or cancelled
	got   Tally
}

// fill makes calls until the window is full.
func (p *streamPlay) fill() error {
	for p.open < p.l.Window && p.next < 100+p.l.Calls {
		id := p.next
		p.next++
		p.open++
		p.got.Calls++
		p.calls[id] = &call{}
		if err := p.c.Send(fmt.Sprintf(p.l.Call, id, id)); err != nil {
			return err
		}
		switch p.l.mode(p.rng) {
		case cancelAtOnce:
			if err := p.cancel(id); err != nil {
				return err
			}
		case cancelOnProgress:
			p.calls[id].cancelOnProgress = true
		}
	}
	return nil
}

func (p *streamPlay) cancel(id int) error {
	p.calls[id].cancelled = true
	p.got.Cancels++
	p.open--
	p.ended++
	return p.c.Send(cancelFrame(id))
}

// take reads one message of the proxy's.
func (p *streamPlay) take(m map[string]any) error {
	switch {
	case m["method"] == "notifications/progress":
		return p.progress(m)
	case m["id"] != nil && m["method"] == nil:
		id, _ := m["id"].(float64)
		c := p.calls[int(id)]
		switch {
		case c == nil || c.answered:
			return stray("an answer the client cannot place: %v", m)
		case c.cancelled:
			c.answered = true
			p.got.Raced++
		default:
			c.answered = true
			p.open--
			p.ended++
			return p.fill()
		}
	}
	return nil
}

// progress reads a progress notification.
func (p *streamPlay) progress(m map[string]any) error {
	tok, _ := m["params"].(map[string]any)["progressToken"].(string)
	id, err := strconv.Atoi(strings.TrimPrefix(tok, "t"))
	c := p.calls[id]
	switch {
	case err != nil || c == nil || c.answered:
		return stray("progress under a token the client does not hold: %v", m)
	case c.cancelled:
		p.got.RacedProgress++
	case c.cancelOnProgress:
		if err := p.cancel(id); err != nil {
			return err
		}
		return p.fill()
	}
	return nil
}

// drain proves that nothing more comes: a ping's answer is the last
// message, on a connection that keeps the order the proxy wrote in; what
// comes before it may only be raced.
func (p *streamPlay) drain() error {
	if err := p.c.Send(`{"jsonrpc":"2.0","id":"last","method":"ping"}`); err != nil {
		return err
	}
	for {
		m, err := p.c.Recv()
		if err != nil {
			return err
		}
		switch {
		case m["id"] == "last":
			return nil
		case m["id"] != nil && m["method"] == nil: // an answer to a cancelled call, raced
			id, _ := m["id"].(float64)
			c := p.calls[int(id)]
			if c == nil || c.answered || !c.cancelled {
				return stray("after the last call: %v", m)
			}
			c.answered = true
			p.got.Raced++
		case m["method"] == "notifications/progress":
			if err := p.progress(m); err != nil {
				return err
			}
		default:
			return stray("after the last call: %v", m)
		}
	}
}

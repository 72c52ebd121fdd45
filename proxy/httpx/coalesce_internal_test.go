package httpx

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"
)

// recConn records what is written to it, write by write.
type recConn struct {
	net.Conn
	mu     sync.Mutex
	writes []string
	closed bool
	wrote  chan string // if set, told of each write
}

func (c *recConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, string(p))
	if c.wrote != nil {
		c.wrote <- string(p)
	}
	return len(p), nil
}

func (c *recConn) Close() error { c.closed = true; return nil }

func (c *recConn) took() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := strings.Join(c.writes, "|")
	c.writes = nil
	return s
}

// TestHeldConn: a held write goes out with the next one, in order; one
// over maxHeld is not held; release and Close write what is held.
func TestHeldConn(t *testing.T) {
	rec := &recConn{}
	c := &heldConn{Conn: rec}
	c.holdNext()
	c.Write([]byte("event"))
	if got := rec.took(); got != "" {
		t.Fatalf("a held write went out: %q", got)
	}
	c.Write([]byte("end"))
	if got := rec.took(); got != "event|end" { // net.Buffers: one writev on a socket
		t.Fatalf("wrote %q, want the held write, then the next", got)
	}
	c.holdNext()
	big := strings.Repeat("x", maxHeld+1)
	c.Write([]byte(big))
	if got := rec.took(); got != big {
		t.Fatalf("a write over maxHeld was held")
	}
	c.Write([]byte("plain"))
	if got := rec.took(); got != "plain" {
		t.Fatalf("wrote %q, want plain: only the next write is held", got)
	}
	c.holdNext()
	c.Write([]byte("a"))
	c.release()
	c.release()
	if got := rec.took(); got != "a" {
		t.Fatalf("release wrote %q, want a, once", got)
	}
	c.holdNext()
	c.Write([]byte("last"))
	c.Close()
	if got := rec.took(); got != "last" || !rec.closed {
		t.Fatalf("Close wrote %q (closed %v), want last, then closed", got, rec.closed)
	}
}

// TestOutStreamHoldsWhileQueued: a line session's stream, read as fasthttp
// does (a Read, then a write of what it returned), joins the writes of the
// events queued together and the body's end; an event with nothing queued
// after it goes out before Read waits for more.
func TestOutStreamHoldsWhileQueued(t *testing.T) {
	rec := &recConn{}
	st := newOutStream(clock.Real, 1)
	st.out = &heldConn{Conn: rec}
	st.send([]byte("e1"), false)
	st.send([]byte("e2"), true)
	st.end()
	p := make([]byte, 64)
	for {
		n, err := st.Read(p)
		if err != nil {
			break
		}
		st.out.Write(p[:n])
	}
	if got := rec.took(); got != "" {
		t.Fatalf("wrote %q before the body's end", got)
	}
	st.out.Write([]byte("end"))
	if got := rec.took(); got != "e1e2|end" {
		t.Fatalf("wrote %q, want the events held together, then the end", got)
	}

	rec.wrote = make(chan string, 4)
	st = newOutStream(clock.Real, 1)
	st.out = &heldConn{Conn: rec}
	st.send([]byte("progress"), false)
	n, _ := st.Read(p)
	st.out.Write(p[:n])
	done := make(chan error)
	go func() {
		_, err := st.Read(p) // nothing queued: releases, then waits
		done <- err
	}()
	if got := <-rec.wrote; got != "progress" {
		t.Fatalf("wrote %q, want the progress before the wait", got)
	}
	st.end()
	if err := <-done; err != io.EOF {
		t.Fatalf("Read: %v, want EOF at the end", err)
	}
}

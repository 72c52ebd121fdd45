// Package conntest holds what tests of connection wrappers share: a
// connection that records its writes. Only tests import it.
package conntest

import (
	"net"
	"strings"
	"sync"
)

// Recorder is a net.Conn that records what is written to it, write by
// write; it reads nothing.
type Recorder struct {
	net.Conn
	mu     sync.Mutex
	writes []string
	// Closed says Close was called.
	Closed bool
	// Wrote, if set, is told of each write.
	Wrote chan string
}

// Write records p.
func (c *Recorder) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, string(p))
	if c.Wrote != nil {
		c.Wrote <- string(p)
	}
	return len(p), nil
}

// Close marks the connection closed.
func (c *Recorder) Close() error { c.Closed = true; return nil }

// Took returns the writes since the last call, joined by "|".
func (c *Recorder) Took() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := strings.Join(c.writes, "|")
	c.writes = nil
	return s
}

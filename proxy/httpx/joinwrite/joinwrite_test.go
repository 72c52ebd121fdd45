package joinwrite

import (
	"strings"
	"testing"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/conntest"
)

// TestConn: a held write goes out with the next one, in order; one
// over maxHeld is not held; release and Close write what is held.
func TestConn(t *testing.T) {
	rec := &conntest.Recorder{}
	c := &Conn{Conn: rec}
	c.HoldNext()
	c.Write([]byte("event"))
	if got := rec.Took(); got != "" {
		t.Fatalf("a held write went out: %q", got)
	}
	c.Write([]byte("end"))
	if got := rec.Took(); got != "event|end" { // net.Buffers: one writev on a socket
		t.Fatalf("wrote %q, want the held write, then the next", got)
	}
	c.HoldNext()
	big := strings.Repeat("x", maxHeld+1)
	c.Write([]byte(big))
	if got := rec.Took(); got != big {
		t.Fatalf("a write over maxHeld was held")
	}
	c.Write([]byte("plain"))
	if got := rec.Took(); got != "plain" {
		t.Fatalf("wrote %q, want plain: only the next write is held", got)
	}
	c.HoldNext()
	c.Write([]byte("a"))
	c.Release()
	c.Release()
	if got := rec.Took(); got != "a" {
		t.Fatalf("release wrote %q, want a, once", got)
	}
	c.HoldNext()
	c.Write([]byte("last"))
	c.Close()
	if got := rec.Took(); got != "last" || !rec.Closed {
		t.Fatalf("Close wrote %q (closed %v), want last, then closed", got, rec.Closed)
	}
}

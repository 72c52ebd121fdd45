//go:build !linux || portable

package wire

import (
	"io"
	"syscall"
)

// hasWritev tells tests which write path the build has.
const hasWritev = false

// vectors is empty where the Outbox has no writev.
type vectors struct{}

// nonBlocking reports nil: without writev (or with the tag portable), every
// writer is written by the Outbox's goroutine, one frame per write, which
// keeps the relay from ever blocking on a peer all the same.
func nonBlocking(io.Writer) syscall.RawConn { return nil }

// writev is never called when nonBlocking reports nil.
func (o *Outbox) writev([]*Buf, bool) ([]*Buf, error) {
	panic("proxy: writev without a non-blocking writer")
}

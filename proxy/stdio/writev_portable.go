//go:build !linux || portable

package stdio

import (
	"io"
	"syscall"
)

// hasWritev tells tests which write path the build has.
const hasWritev = false

// vectors is empty where the outbox has no writev.
type vectors struct{}

// nonBlocking reports nil: without writev (or with the tag portable), every
// writer is written by the outbox's goroutine, one frame per write, which
// keeps the relay from ever blocking on a peer all the same.
func nonBlocking(io.Writer) syscall.RawConn { return nil }

// writev is never called when nonBlocking reports nil.
func (o *outbox) writev([]*buf, bool) ([]*buf, error) {
	panic("proxy: writev without a non-blocking writer")
}

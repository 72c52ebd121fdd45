// Package strict is a client as strict as Claude Code, which closes its
// whole connection over one message it cannot place: an answer for an id it
// has no request for, a second answer, or progress under a token it does not
// hold. It makes many calls of a slow tool through the proxy, a window of
// them at a time, cancels some at random (at once, or at their first
// progress), and tells apart what a proxy cannot help (an answer or progress
// already on its way when the cancel reached it) from what it must never let
// through. The end-to-end tests and the load driver (bench/httpload -strict)
// share it.
package strict

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Load is what a strict client does.
type Load struct {
	// Calls is how many calls it makes, Window how many at once.
	Calls, Window int
	// Call is a call's JSON-RPC request, given its id twice (for the id and
	// a progress token "t<id>"); one without "progressToken" has no progress.
	Call string
	// Cancels says whether it cancels (about a third of its calls); a
	// client without them lets every call run to its answer.
	Cancels bool
	// Seed makes its choices repeatable.
	Seed uint64
}

// Tally is what a strict client's calls saw.
type Tally struct {
	Calls   int // made
	Cancels int // cancelled
	// Raced are the cancelled calls answered all the same, their answer on
	// its way before the cancel reached the proxy; RacedProgress likewise
	// for progress. Neither is a fault: no proxy can recall them.
	Raced, RacedProgress int
}

// Accepted is how many cancels the proxy must have accepted: all but the
// raced ones.
func (t Tally) Accepted() int { return t.Cancels - t.Raced }

// Add adds o's counts to t's.
func (t *Tally) Add(o Tally) {
	t.Calls += o.Calls
	t.Cancels += o.Cancels
	t.Raced += o.Raced
	t.RacedProgress += o.RacedProgress
}

func (t Tally) String() string {
	return fmt.Sprintf("%d calls: %d cancelled (%d of them answered all the same, on the way before the cancel; %d progress notifications likewise)",
		t.Calls, t.Cancels, t.Raced, t.RacedProgress)
}

// ErrStray is the error of a message the strict client would have closed
// its connection over.
var ErrStray = errors.New("a strict client would close its connection")

func stray(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrStray}, args...)...)
}

// Modes of a call: cancelled at once, at its first progress, or let run.
const (
	cancelAtOnce = iota
	cancelOnProgress
	letRun
)

// mode draws how a call ends.
func (l Load) mode(rng *rand.Rand) int {
	if !l.Cancels {
		return letRun
	}
	return min(rng.IntN(6), letRun)
}

// Wait bounds every wait for a message from the proxy.
const Wait = 30 * time.Second

// cancelFrame is the cancel of the call id.
func cancelFrame(id int) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d,"reason":"strict"}}`, id)
}

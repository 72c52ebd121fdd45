package httpx

import (
	"runtime/debug"
	"testing"
	"time"
)

// Watchdog fails the test binary with every goroutine's stack if the test
// runs longer than d: a hang shows where it waits, at once. Exported for
// the package's external tests (watchdog), in test builds only.
func Watchdog(t testing.TB, d time.Duration) {
	Stall(t, d)
}

// Stall is Watchdog for a test whose length grows with the machine's load
// (a soak of a thousand calls, each with a real timer's wait): it fails
// the test binary if d passes without a call of the returned alive, which
// the test makes at each step it completes. A hang still shows at once;
// a slow machine is no hang.
func Stall(t testing.TB, d time.Duration) (alive func()) {
	tm := time.AfterFunc(d, func() {
		debug.SetTraceback("all")
		panic("test " + t.Name() + " hung: no progress in " + d.String())
	})
	t.Cleanup(func() { tm.Stop() })
	return func() { tm.Reset(d) }
}

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
	tm := time.AfterFunc(d, func() {
		debug.SetTraceback("all")
		panic("test " + t.Name() + " hung")
	})
	t.Cleanup(func() { tm.Stop() })
}

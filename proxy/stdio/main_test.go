package stdio_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: every
// relay, outbox writer and test peer must have a documented end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

package wire

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: an
// Outbox's writer must end once its queue is empty, or once it stopped.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

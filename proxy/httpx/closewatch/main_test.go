package closewatch

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if any goroutine outlives them: each
// Watcher's loop ends with its Stop, each Queue's functions with theirs.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

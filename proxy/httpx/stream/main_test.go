package stream

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/leaktest"
)

// TestMain fails the package's tests if any goroutine outlives them, but
// fasthttp's process-wide housekeeping.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, leaktest.ProcessWide...) }

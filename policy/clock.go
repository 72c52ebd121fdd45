package policy

import "github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy/clock"

// Clock is the time deadlines run on; tests inject their own.
type Clock = clock.Clock

// Timer is a pending AfterFunc.
type Timer = clock.Timer

package httpx

import "time"

// ownedWait bounds how long a DELETE waits for its session's cancels to
// reach the upstream, and a shutdown for the cancels, then for the rest
// the sidecar started. A variable for the tests.
var ownedWait = 5 * time.Second

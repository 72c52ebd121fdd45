//go:build unix

package main

import (
	"testing"
	"time"
)

// TestHarnessKeepsFramesAfterExit: a frame the proxy writes just before it
// exits reaches the test, however late the test reads it. The harness once
// drained stdout itself once the proxy's stderr ended, racing the test for
// such frames (TestE2EStdioClientToGoSDKSSEServer failed so in CI, its
// bridge answering the call in flight and exiting at once). Here the
// server exits after reading the request; the proxy answers it for the
// server and exits; the test reads only after the exit.
func TestHarnessKeepsFramesAfterExit(t *testing.T) {
	t.Parallel()
	w := startWrapped(t, "--", "sh", "-c", "read line; exit 0")
	w.send(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}`)
	select {
	case <-w.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the proxy did not exit after its server")
	}
	got := w.recvUntil(isResponse(7))
	if _, ok := got[len(got)-1]["error"]; !ok {
		t.Errorf("the call in flight got %v, want the proxy's error", got[len(got)-1])
	}
}

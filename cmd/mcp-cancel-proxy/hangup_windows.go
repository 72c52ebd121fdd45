package main

import "io"

// hangup watches nothing on Windows: a client that closes the proxy's
// stdin is seen by the relay when it next reads, which a server that has
// stopped reading its own stdin can delay; Ctrl-C and the end of the
// proxy's console still stop it.
func hangup(io.Reader) <-chan struct{} { return nil }

package main

import "io"

// clientStdout returns stdout as it is: on Windows the relay's writes go
// through the outbox's goroutine (the portable path), which never blocks
// the relay either.
func clientStdout(stdout io.WriteCloser) io.WriteCloser { return stdout }

// clientStdin returns stdin as it is.
func clientStdin(stdin io.ReadCloser) io.ReadCloser { return stdin }

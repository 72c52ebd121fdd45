//go:build unix

package main

import (
	"io"
	"os"
	"syscall"
)

// clientStdout returns the proxy's stdout ready for the relay. When it is a
// pipe or a socket (as when an MCP client starts the proxy), it is switched
// to non-blocking mode, so that the relay can write a frame with one
// attempt and leave only what did not fit to its writer goroutine; a
// terminal or a file is left as it is.
//
// The mode belongs to the open file description, which the client created
// for this process alone; the client only reads from the other end.
func clientStdout(stdout io.WriteCloser) io.WriteCloser {
	if f, ok := stdout.(*os.File); ok {
		if nf := pollable(f); nf != nil {
			return nf
		}
	}
	return stdout
}

// clientStdin likewise makes a pipe or socket stdin pollable: reads then
// park the relay goroutine instead of holding a thread in a blocking read.
func clientStdin(stdin io.ReadCloser) io.ReadCloser {
	if f, ok := stdin.(*os.File); ok {
		if nf := pollable(f); nf != nil {
			return nf
		}
	}
	return stdin
}

// pollable switches a pipe or socket to non-blocking mode and returns a new
// File for it, which the runtime's poller then serves; nil for anything else.
func pollable(f *os.File) *os.File {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return nil
	}
	if mode := st.Mode & syscall.S_IFMT; mode != syscall.S_IFIFO && mode != syscall.S_IFSOCK {
		return nil
	}
	if err := syscall.SetNonblock(int(f.Fd()), true); err != nil {
		return nil
	}
	return os.NewFile(f.Fd(), f.Name()) // a new File sees the mode and uses the poller
}

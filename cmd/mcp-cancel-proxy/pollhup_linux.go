package main

import "golang.org/x/sys/unix"

// pollHangUp asks poll for a socket's half-close too (the client shut its
// writing side): Linux's POLLRDHUP.
const pollHangUp = unix.POLLRDHUP

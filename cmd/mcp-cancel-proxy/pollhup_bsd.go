//go:build unix && !linux

package main

// pollHangUp is nothing more than POLLHUP, which poll always reports:
// macOS and the BSDs have no POLLRDHUP.
const pollHangUp = 0

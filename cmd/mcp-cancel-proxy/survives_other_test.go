//go:build unix && !linux

package main

// survives reports whether pid is alive (no pidfd to wait on here).
func survives(pid int) bool { return alive(pid) }

//go:build !linux || portable

package upstream_test

// hasWritev says a PipeConn writes a stdio server's pipe with writev (a
// flush writes what it can at once).
const hasWritev = false

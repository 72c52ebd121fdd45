// Package closewatch sees a client leave: it reports, at once, the peer of
// a connection hanging up while the HTTP front has nothing to write to it
// (fasthttp notices only when a write fails, which for a tool still working
// may be never; in protocol 2026-07-28 that close is the request's cancel).
// One kernel watcher (epoll on Linux, kqueue on macOS and the BSDs) serves
// every watched connection of a front, waited on by one goroutine, which the
// front stops; elsewhere (Windows) nothing is watched, and a close is seen
// at the next write. Queue, the delay that a watch begins after, lets most
// streams, answered sooner, cost no system call and no timer of their own.
package closewatch

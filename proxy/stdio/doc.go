// Package stdio relays newline-delimited JSON-RPC between an MCP client
// (a pair of byte streams, or a front that submits its messages) and an
// MCP server reached as an upstream.Conn (Lines; a stdio server's pipes
// are an upstream.PipeConn, PipeServer), asking a proxy.Tracker about
// every message.
//
// A cancel takes effect when it is read, even while the receiver is not
// reading: the relay never blocks on a peer. Frames toward each peer wait in
// an outbox (package wire; toward a stdio server, its PipeConn's own); a
// cancel whose request is still queued withdraws it (neither is ever
// sent), and one whose request has been written goes ahead of everything
// queued. On Linux the relay writes each burst with one
// non-blocking writev when its own input runs dry; elsewhere, or built with
// the tag portable, a goroutine per peer writes everything, a burst at a
// time, with the same ordering and withdraw rules.
package stdio

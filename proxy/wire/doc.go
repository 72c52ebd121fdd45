// Package wire holds frames on their way to one peer: pooled frame
// buffers (Buf), the tickets that tell whether a queued frame was written
// and withdraw it while it was not (Ticket), and the Outbox that writes
// them in order, urgent ones (a cancel whose request is written) ahead of
// the rest, without ever making its sender wait for a peer that does not
// read. On Linux a sender writes its own burst with one non-blocking
// writev when its input runs dry; elsewhere, or built with the tag
// portable, the Outbox's goroutine writes everything, a burst at a time,
// with the same ordering and withdraw rules. An Outbox may instead hand
// each frame whole to a front (Deliver) or to a server that takes messages
// (Sender).
//
// The stdio relay (package stdio) writes to both its peers through it; a
// stdio server's connection (upstream.PipeConn) is one, which the relay
// queues in directly.
package wire

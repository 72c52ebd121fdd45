package proxy

import (
	"go.uber.org/zap/zapcore"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
)

// A governor may serve requests itself: a task it hosts for a client on a
// server that runs its tool only as a plain call (package policy,
// hosted.go). It holds the client's request (Admission.Hold), runs the
// call upstream as a request of the proxy's own (Actions.SendOwn, which
// returns the own call), answers the held request itself (Actions.Serve),
// and may cancel the own call upstream (Actions.CancelOwn). It may also
// rewrite the server's answer to a request it admitted with
// Admission.Rewrite (Rewriter): the capabilities of initialize, the tools
// of tools/list.

// Rewriter is a Governor that rewrites the server's answers to requests
// it admitted with Admission.Rewrite.
type Rewriter interface {
	// RewriteResult returns what the client gets as the result of c in
	// place of the server's (m), or nil to pass it as it is. It runs on
	// the deciding goroutine and must not block.
	RewriteResult(c *Call, m *framing.Message) []byte
}

// rewritten is the client's answer to c with result in place of m's.
func rewritten(c *call, result []byte) []byte {
	dst := append([]byte(`{"jsonrpc":"2.0","id":`), c.id.AppendJSON(nil)...)
	dst = append(dst, `,"result":`...)
	dst = append(dst, result...)
	return append(dst, '}')
}

// Served records that the proxy answered a held request itself (a
// hosted task's): it was never sent, and no answer of the server's can
// come for it.
func (t *Tracker) Served(c *Call) {
	p := &t.peers[Client]
	p.issued.settle(c)
	t.count(cForwarded, -1) // counted when it was queued; it never left
	t.note(Client, p.issued.dir, ActServed, framing.KindRequest, c.method, c.id,
		"a task it hosts: never sent", zapcore.DebugLevel)
	if c.span != nil {
		c.span.End("served by the proxy", false)
	}
}

// CancelOwn cancels a request of the proxy's own (OwnCall) on the
// server, as from source for reason, and returns the notification to
// send; nil if it was answered already. Its answer, should one still
// come, goes to its onAnswer all the same.
func (t *Tracker) CancelOwn(c *Call, source Source, reason string) []byte {
	if !t.peers[Client].issued.ownInFlight(c) {
		return nil
	}
	t.count(cCancelsForwarded, 1)
	if t.opts.OnCancel != nil {
		t.opts.OnCancel(source)
	}
	t.noteCancel(Client, ClientToServer, framing.KindNotification, c, source, reason)
	return framing.AppendCancelled(nil, c.upID, reason)
}

// WithdrawOwn records that a cancelled request of the proxy's own never
// reached the server (its POST was cut before a byte of it was written):
// no answer can come, and the governor hears that it was never sent.
func (t *Tracker) WithdrawOwn(c *Call) {
	p := &t.peers[Client]
	p.issued.forget(c)
	t.count(cWithdrawn, 1)
	if g := t.opts.Governor; g != nil {
		g.Observe(Change{Kind: ChangeWithdrawn, Call: c})
	}
	t.note(Client, p.issued.dir, ActWithdrawn, framing.KindRequest, c.method, c.id,
		"the proxy's own request, cancelled before it was sent: neither it nor its cancel reaches the server", zapcore.InfoLevel)
}

// OwnCall is OwnRequest that also returns the call, for CancelOwn.
// progress, if valid, is the progress token params carry: the server's
// progress under it goes to the client until the call is answered or
// cancelled (a hosted task's call, under its client's token).
func (t *Tracker) OwnCall(method string, params []byte, progress framing.ID, onAnswer func(m *framing.Message)) (*Call, []byte) {
	c := t.peers[Client].issued.own(method, onAnswer)
	if progress.IsValid() {
		t.peers[Client].issued.adoptToken(c, progress)
	}
	dst := append([]byte(`{"jsonrpc":"2.0","id":`), c.upID.AppendJSON(nil)...)
	dst = append(dst, `,"method":`...)
	dst = framing.StringID(method).AppendJSON(dst)
	dst = append(dst, `,"params":`...)
	dst = append(dst, params...)
	return c, append(dst, '}')
}

// Lingerer is a Governor whose work may outlast its session's requests:
// the tasks it hosts for a request without a session (protocol
// 2026-07-28), which the client polls on requests of their own. A front
// that ends such a session with its request asks it first.
type Lingerer interface {
	// Linger reports whether the governor still has work; if it has, it
	// calls done once that work is over, and the front then ends the
	// session as it would have.
	Linger(done func()) bool
}

// OwnWork is a Governor with work of its own upstream (the calls of the
// tasks it hosts), which Session.CancelAll (a shutdown, a session's end)
// cancels with the client's calls.
type OwnWork interface {
	// CancelOwnWork cancels that work upstream, as from source for why.
	CancelOwnWork(source Source, why string)
}

// OwnMessages is a Governor that takes the server's messages about a
// request of its own that its transport has nowhere to put: over a
// Streamable HTTP upstream they come on that request's own stream, which
// no client reads (a hosted task's progress, and its server's requests).
type OwnMessages interface {
	// FromOwn takes frame, a message the server sent on c's stream, as
	// the tracker passes it to the client.
	FromOwn(c *Call, frame []byte)
}

package proxy

import (
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
)

// Action is what the proxy did with a message.
type Action string

// Actions reported in Events.
const (
	ActForwarded      Action = "forwarded"
	ActCancelAccepted Action = "cancel accepted"
	ActCancelDropped  Action = "cancel dropped"
	ActSuppressed     Action = "suppressed"
	ActDropped        Action = "dropped"
	ActReplied        Action = "answered by proxy"
	ActWithdrawn      Action = "withdrawn before dispatch"
	// ActJoined: a re-issue answered with the answer of the call it joined
	// (reissue: join), never sent.
	ActJoined Action = "joined a running call"
	// ActServed: a held request the proxy answered itself (a task it
	// hosts: its tasks/* requests, and the call that made it), never sent.
	// Its frame was decided when it was held: this is the answer.
	ActServed Action = "served by the proxy"
	// ActTaken: an answer to a request of the proxy's own (its tasks/cancel,
	// a restart's initialize), or progress under a progress token of its
	// own (reset_on_progress), which the proxy keeps. An event only: no
	// counter or metric moves for it.
	ActTaken Action = "taken by the proxy"
	// ActSilenced: a message about a request that has ended (a second
	// answer, progress after the answer) or progress under a token no
	// request in flight carries, kept from its issuer.
	ActSilenced Action = "silenced after the end"
)

// feed is the name of the events feed's event for the action.
func (a Action) feed() zap.Field {
	switch a {
	case ActCancelAccepted:
		return events.Mark(events.CancelAccepted)
	case ActCancelDropped:
		return events.Mark(events.CancelDropped)
	case ActSuppressed:
		return events.Mark(events.Suppressed)
	case ActReplied, ActServed:
		return events.Mark(events.Answered)
	case ActWithdrawn:
		return events.Mark(events.Withdrawn)
	case ActJoined:
		return events.Mark(events.Joined)
	case ActSilenced:
		return events.Mark(events.Silenced)
	}
	return events.Mark(events.Dropped)
}

// Event describes one decision of the proxy, for timelines and tests.
type Event struct {
	Time   time.Time
	From   string // "client" or "server": who sent the message
	Action Action
	Kind   framing.Kind
	Method string     // the message's method, or the answered request's
	ID     framing.ID // the message's id, or the id of the request a cancel or progress names
	Note   string     // why, for drops and suppressions
}

// Stats counts what a transport's session did (stdio.Session.Stats).
type Stats struct {
	Forwarded           int64 // messages passed on
	CancelsForwarded    int64 // cancels accepted and passed on
	CancelsDropped      int64 // invalid cancels not passed on
	ResponsesSuppressed int64 // late responses to cancelled requests
	ProgressSuppressed  int64 // progress for cancelled requests
	Dropped             int64 // other messages not passed on (unknown responses, invalid messages)
	ProxyErrors         int64 // error responses the proxy wrote itself
	Withdrawn           int64 // requests cancelled while still queued in the proxy, never sent
	Joined              int64 // re-issues answered with the answer of the call they joined, never sent
	Silenced            int64 // messages about a request that had ended: second answers, progress after the end or for no request
}

// Add adds o's counts to s.
func (s *Stats) Add(o Stats) {
	s.Forwarded += o.Forwarded
	s.CancelsForwarded += o.CancelsForwarded
	s.CancelsDropped += o.CancelsDropped
	s.ResponsesSuppressed += o.ResponsesSuppressed
	s.ProgressSuppressed += o.ProgressSuppressed
	s.Dropped += o.Dropped
	s.ProxyErrors += o.ProxyErrors
	s.Withdrawn += o.Withdrawn
	s.Joined += o.Joined
	s.Silenced += o.Silenced
}

// Counters is a set of counters that several trackers add to besides their
// own (TrackerOptions.Totals): an HTTP front's, for every session it ever
// had. The zero Counters is ready. Safe for concurrent use.
type Counters struct{ c stats }

// Stats returns the counts so far.
func (c *Counters) Stats() Stats { return c.c.snapshot() }

// counter names one of Stats' counts.
type counter int

const (
	cForwarded counter = iota
	cCancelsForwarded
	cCancelsDropped
	cResponsesSuppressed
	cProgressSuppressed
	cDropped
	cProxyErrors
	cWithdrawn
	cJoined
	cSilenced
	nCounters
)

type stats [nCounters]atomic.Int64

func (s *stats) snapshot() Stats {
	return Stats{
		Forwarded:           s[cForwarded].Load(),
		CancelsForwarded:    s[cCancelsForwarded].Load(),
		CancelsDropped:      s[cCancelsDropped].Load(),
		ResponsesSuppressed: s[cResponsesSuppressed].Load(),
		ProgressSuppressed:  s[cProgressSuppressed].Load(),
		Dropped:             s[cDropped].Load(),
		ProxyErrors:         s[cProxyErrors].Load(),
		Withdrawn:           s[cWithdrawn].Load(),
		Joined:              s[cJoined].Load(),
		Silenced:            s[cSilenced].Load(),
	}
}

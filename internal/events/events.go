// Package events is the proxy's events feed: the log entries that mark a
// moment someone may wait for or act on (a listener ready, a server
// started or gone, a cancel accepted, a late answer suppressed, a hook run),
// each named by a stable Name in its "event" field, written as JSON lines to
// a file (log.events) and streamed to whoever follows the admin listener's
// /events, whatever the log's level and sampling.
//
// An entry joins the feed by carrying Mark(name) among its fields: the log
// line and the event are one call, so no event can be logged but not fed,
// and a consumer (a script, a dashboard, the end-to-end tests) reads names
// and fields, never the wording of a message, which may change.
package events

import (
	"os"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/buffer"
	"go.uber.org/zap/zapcore"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/logcut"
)

// Key is the field that names an entry's event.
const Key = "event"

// Name is the type of an event. The names are part of the proxy's
// interface: docs/events.md lists each with its fields.
type Name string

// The events of the feed.
const (
	SidecarListening Name = "sidecar_listening" // listen: the HTTP front's address
	AdminListening   Name = "admin_listening"   // admin: the admin listener's address

	ServerStarted   Name = "server_started"   // a stdio server's process started (argv)
	ServerExited    Name = "server_exited"    // it ended (code or error)
	ServerStopping  Name = "server_stopping"  // the proxy stops it (why)
	ServerSignalled Name = "server_signalled" // it did not end in time: signal is SIGTERM or SIGKILL
	ServerRestarted Name = "server_restarted" // restarted by a policy rule's escalate: restart

	UpstreamDetected      Name = "upstream_detected"       // transport: what --upstream speaks
	UpstreamSessionOpened Name = "upstream_session_opened" // an HTTP+SSE upstream's session (endpoint)
	UpstreamStateless     Name = "upstream_stateless"      // a stateless upstream speaks revision 2026-07-28
	// SignInStarted: the bridge's upstream wants an OAuth sign-in: the
	// authorization flow waits for the user (server, status); SignedIn:
	// it is done (server, scopes, refreshable), never naming a token.
	SignInStarted Name = "signin_started"
	SignedIn      Name = "signed_in"

	SessionOpened       Name = "session_opened"        // a Streamable HTTP client's session (session)
	LegacySessionOpened Name = "legacy_session_opened" // an HTTP+SSE client's session
	SessionIdle         Name = "session_idle"          // an idle session's stdio server is stopped
	// StreamLeft: a client left a response stream that still owed answers
	// (requests); then says what follows: cancelled (2026-07-28: the close
	// is the cancel), cancelled unless resumed (after the disconnect grace),
	// or runs on (a 2025 close is no cancel).
	StreamLeft Name = "stream_left"

	// Decisions on messages (the tracker's): from, direction, kind, method,
	// id, reason; a cancel also tool and source.
	CancelAccepted Name = "cancel_accepted"
	CancelDropped  Name = "cancel_dropped"
	Suppressed     Name = "suppressed" // a late answer or progress kept from the client
	Dropped        Name = "dropped"    // a message not passed on (unknown answer, invalid)
	Answered       Name = "answered"   // the proxy answered a request itself
	Withdrawn      Name = "withdrawn"  // a held request cancelled before it was sent
	Joined         Name = "joined"     // a re-issue answered with the answer of the call it joined (reissue: join)
	// Silenced: a message about a request that had ended (a second answer,
	// progress after the answer) or progress for no request in flight,
	// kept from the issuer; also bytes.
	Silenced Name = "silenced"

	// DeadlinePassed: a rule's timeout passed; the request is cancelled as
	// a client's cancel would (method, tool, id, timeout).
	DeadlinePassed Name = "deadline_passed"

	// ClientTimeoutPassed: a call's client_timeout passed, the time its
	// client waits before it gives up without a word; the call is
	// cancelled as at a deadline (method, tool, id, client, timeout, auto).
	ClientTimeoutPassed Name = "client_timeout_passed"

	// TaskHosted: a task-augmented call of a task: host rule is run as a
	// task the proxy hosts (tool, id, task).
	TaskHosted Name = "task_hosted"

	// ReissueJoined: a re-issue joined the call of a reissue: join rule
	// already running (tool, id, joined: that call's id).
	ReissueJoined Name = "reissue_joined"

	HookRan    Name = "hook_ran"    // a compensating hook succeeded (phase, tool, id)
	HookFailed Name = "hook_failed" // it failed (and is retried, or becomes an orphan)

	PolicyReloaded Name = "policy_reloaded" // a new policy is in force
	PolicyKept     Name = "policy_kept"     // a changed configuration was refused; the old policy stays

	FleetMember      Name = "fleet_member"      // joined the fleet (cluster.nats)
	FleetLost        Name = "fleet_lost"        // the connection to NATS was lost
	FleetBack        Name = "fleet_back"        // and is back
	FleetUnreachable Name = "fleet_unreachable" // the fleet's job queue cannot be reached: hooks kept locally
	FleetStray       Name = "fleet_stray"       // a cancel accepted for a request another replica runs

	// EventsLeftOut: more of a session's Bounded events than the feed's
	// bound came in a window; how many were left out (session, left_out,
	// bound, window), said before the session's next such event.
	EventsLeftOut Name = "events_left_out"
)

// Mark is the field that puts a log entry in the feed as an event named n.
func Mark(n Name) zap.Field { return zap.String(Key, string(n)) }

// Feed writes the marked entries of a logger (Core) to a file and to its
// subscribers. Safe for concurrent use; the zero Feed feeds nothing.
type Feed struct {
	enc    zapcore.Encoder
	active atomic.Bool // a file or a subscriber: entries are checked at every level

	mu      sync.Mutex // guards subs, closed and the file's pending lines
	subs    map[*Subscription]struct{}
	closed  bool
	dropped atomic.Int64 // lines not written (a failed write, a full subscriber, the bound per session)
	bound   bound
	file    *fileWriter // nil: no file
}

// Open returns a feed that appends to the file at path ("" for none, only
// subscribers), created if need be, readable by its owner only.
func Open(path string) (*Feed, error) {
	f := &Feed{enc: logcut.Encoder(zapcore.NewJSONEncoder(encoderConfig())), subs: map[*Subscription]struct{}{},
		bound: bound{perSession: DefaultPerSession, window: DefaultWindow, by: map[string]*window{}}}
	if path != "" {
		file, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		f.file = newFileWriter(file, &f.mu, &f.dropped)
		f.active.Store(true)
	}
	return f, nil
}

// TimeLayout is the form of an event's time.
const TimeLayout = "2006-01-02T15:04:05.000000000Z07:00"

// encoderConfig is the log's JSON form (durations with units) without the
// caller or the logger's name, its time in UTC to the nanosecond (RFC 3339,
// nine digits always), so that a program can order events against its own
// clock (bench/cancel does).
func encoderConfig() zapcore.EncoderConfig {
	c := zap.NewProductionEncoderConfig()
	c.TimeKey = "time"
	c.NameKey = ""
	c.CallerKey = ""
	c.StacktraceKey = ""
	c.EncodeTime = func(t time.Time, enc zapcore.PrimitiveArrayEncoder) {
		enc.AppendString(t.UTC().Format(TimeLayout))
	}
	c.EncodeDuration = zapcore.StringDurationEncoder
	return c
}

// Dropped is how many events were not written: a failed write to the file,
// a subscriber too slow to take them, or a session's events beyond its
// bound (bound.go).
func (f *Feed) Dropped() int64 { return f.dropped.Load() }

// Close stops the feed: the file is closed, every subscription ends.
func (f *Feed) Close() error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	f.active.Store(false)
	for s := range f.subs {
		close(s.c)
		delete(f.subs, s)
	}
	if f.file != nil {
		return f.file.closeLocked() // every line published is written first
	}
	return nil
}

// publish writes one encoded line to the file and the subscribers.
func (f *Feed) publish(line *buffer.Buffer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	if f.file != nil {
		f.file.addLocked(line.Bytes())
	}
	for s := range f.subs {
		select {
		case s.c <- append([]byte(nil), line.Bytes()...):
		default:
			f.dropped.Add(1)
		}
	}
}

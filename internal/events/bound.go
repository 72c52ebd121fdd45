package events

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// The feed's bound per session: a peer that sends 200,000 messages to be
// suppressed made 59 MB of events. Of one session's events about
// messages a peer can send without end (Bounded: suppressed, silenced,
// dropped; by the "session" field, those without one the process's), at
// most PerSession are written in each Window; the rest are left out,
// counted (Dropped), and the session's next such event after its window
// is preceded by an events_left_out event that says how many. The others
// (a cancel accepted, a server started) are each one of a client's own
// acts, and all written.
const (
	DefaultPerSession = 1000
	DefaultWindow     = time.Minute
	// maxTracked bounds the sessions counted at once: beyond, those whose
	// window is over are forgotten, and if that is not enough, all.
	maxTracked = 10_000
)

// Bounded are the events the bound applies to.
var Bounded = []Name{Suppressed, Silenced, Dropped}

// bounded reports whether fields (or the context's) name a Bounded event.
func bounded(fields []zapcore.Field) bool {
	for _, f := range fields {
		if f.Key == Key && f.Type == zapcore.StringType {
			return slices.Contains(Bounded, Name(f.String))
		}
	}
	return false
}

// sessionKey is the field that names an event's session.
const sessionKey = "session"

// bound counts each session's events in its window.
type bound struct {
	perSession int
	window     time.Duration

	mu sync.Mutex
	by map[string]*window
}

// window is one session's count since start.
type window struct {
	start      time.Time
	n, leftOut int64
}

// admit counts an event of session at t: it reports whether to write it,
// and how many of the session's events its last window left out, if that
// window just ended with some left out.
func (b *bound) admit(session string, t time.Time) (write bool, leftOut int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.by == nil { // a Feed not made by Open
		b.by, b.perSession, b.window = map[string]*window{}, cmp.Or(b.perSession, DefaultPerSession), cmp.Or(b.window, DefaultWindow)
	}
	w := b.by[session]
	if w == nil {
		if len(b.by) >= maxTracked {
			b.forgetLocked(t)
		}
		w = &window{start: t}
		b.by[session] = w
	}
	if t.Sub(w.start) >= b.window {
		leftOut = w.leftOut
		*w = window{start: t}
	}
	if w.n < int64(b.perSession) {
		w.n++
		return true, leftOut
	}
	w.leftOut++
	return false, leftOut
}

// forgetLocked forgets the sessions whose window is over at t without
// anything left out, or every session if that leaves too many.
func (b *bound) forgetLocked(t time.Time) {
	for k, w := range b.by {
		if t.Sub(w.start) >= b.window && w.leftOut == 0 {
			delete(b.by, k)
		}
	}
	if len(b.by) >= maxTracked {
		clear(b.by)
	}
}

// publishLeftOut writes the events_left_out event of session's last
// window, which left n out.
func (f *Feed) publishLeftOut(session string, n int64, t time.Time) {
	line, err := f.enc.Clone().EncodeEntry(zapcore.Entry{Level: zapcore.WarnLevel, Time: t,
		Message: "events of a session were left out of the feed: more than its bound in a window"},
		[]zapcore.Field{Mark(EventsLeftOut), zap.String(sessionKey, session), zap.Int64("left_out", n),
			zap.Int("bound", f.bound.perSession), zap.Duration("window", f.bound.window)})
	if err != nil {
		return
	}
	f.publish(line)
	line.Free()
}

// sessionOf returns the value of the session field among fields, if any.
func sessionOf(fields []zapcore.Field) (string, bool) {
	for _, f := range fields {
		if f.Key == sessionKey && f.Type == zapcore.StringType {
			return f.String, true
		}
	}
	return "", false
}

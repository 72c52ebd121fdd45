package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"go.uber.org/zap"

	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/framing"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/internal/events"
	"github.com/mcp-cancel-proxy/mcp-cancel-proxy/proxy"
)

// A reissue: join rule's call is shared with its re-issues: a later call
// of the same tool with the same arguments (or the same value at the
// rule's reissue_key) in the same session, while the first still runs
// upstream or within reissue_window of its suppressed answer. A re-issue
// is held by the transport and never sent: it is answered with the shared
// call's answer (Actions.Answer), and gets its progress under its own
// token (Actions.Notify). The client's cancel of the shared call is held
// (Admission.DeferCancel) until nobody has waited on it for
// reissue_grace; then it goes to the server (Actions.ReleaseCancel).

// StatusJoined begins the status of the audit line of a re-issue
// answered with the answer of the call it joined; the status goes on with
// that call's id, "(request 7)", which joined_id holds too.
const StatusJoined = "joined the call already running"

// shared is a call that re-issues may join.
type shared struct {
	key     string
	orig    *record       // the call the server runs
	waiters []*proxy.Call // re-issues waiting for its answer, held
	// cancelled: orig's client cancelled it, and its cancel is held until
	// grace passes with nobody waiting; sent once it went.
	cancelled, sent bool
	grace           Timer
	// answer is the suppressed answer, as the server sent it, and idSpan
	// where its id is: it serves re-issues, renamed to each (the
	// tracker's own renaming, framing.Splice), until expiry fires.
	answer []byte
	idSpan framing.Span
	expiry Timer
}

// reissueKey is what makes a call of tool the same as another for rule:
// a digest of the tool and its arguments' canonical JSON, or of the value
// at the rule's reissue_key; false when that points at nothing.
func reissueKey(rule *Effective, tool string, m *framing.Message) (string, bool) {
	var doc any
	if m.ParamsSpan.Found() {
		d := json.NewDecoder(bytes.NewReader(m.Raw[m.ParamsSpan.Start:m.ParamsSpan.End]))
		d.UseNumber() // numbers as written: 2^53+1 is not 2^53
		if d.Decode(&doc) != nil {
			return "", false
		}
	}
	var canon json.RawMessage
	if rule.ReissueKey != nil {
		v, ok := rule.ReissueKey.evalValue(doc)
		if !ok {
			return "", false
		}
		canon = v
	} else {
		var args any
		if obj, ok := doc.(map[string]any); ok {
			args = obj["arguments"]
		}
		canon, _ = json.Marshal(args) // map keys sorted: canonical
	}
	h := sha256.New()
	h.Write([]byte(tool))
	h.Write([]byte{0})
	h.Write(canon)
	return hex.EncodeToString(h.Sum(nil)), true
}

// joinLocked makes c a waiter of the call its key names, if one may be
// joined, and reports whether it did: c is then held, and answered when
// that call is (at once, if its answer is kept).
func (g *governor) joinLocked(c *proxy.Call, tool, key string) bool {
	s := g.shared[key]
	if s == nil || s.sent && s.answer == nil { // its cancel went: the server may have stopped it
		return false
	}
	if g.tools == nil {
		g.tools = map[*proxy.Call]string{}
	}
	g.tools[c] = tool // for its audit line, should it be cancelled
	if s.answer != nil {
		reply := framing.Splice(nil, s.answer, s.idSpan, c.ID())
		g.work.post(func() { g.answerJoined(c, s.orig, reply) })
		return true
	}
	s.waiters = append(s.waiters, c)
	g.sharedBy[c] = s
	if s.grace != nil { // a cancel was waiting for a re-issue: here it is
		s.grace.Stop()
		s.grace = nil
	}
	g.log.Info("re-issue joined the call already running", events.Mark(events.ReissueJoined), zap.String("tool", tool),
		zap.Stringer("id", c.ID()), zap.ByteString("joined", s.orig.id))
	return true
}

// shareLocked makes r's call one that re-issues may join.
func (g *governor) shareLocked(r *record, key string) {
	if old := g.shared[key]; old != nil {
		g.unshareLocked(old) // its cancel went: the new call is the one to join
	}
	if g.shared == nil {
		g.shared, g.sharedBy = map[string]*shared{}, map[*proxy.Call]*shared{}
		g.sharing.Store(true)
	}
	s := &shared{key: key, orig: r}
	g.shared[key] = s
	g.sharedBy[r.c] = s
}

// unshareLocked forgets s.
func (g *governor) unshareLocked(s *shared) {
	if g.shared[s.key] == s {
		delete(g.shared, s.key)
	}
	delete(g.sharedBy, s.orig.c)
	for _, w := range s.waiters {
		delete(g.sharedBy, w)
	}
	for _, t := range []Timer{s.grace, s.expiry} {
		if t != nil {
			t.Stop()
		}
	}
}

// sharedAnsweredLocked gives the waiters of c's shared call its answer m
// (the client's, or suppressed: late), or sends them for real when the
// call ended without one (m nil). A suppressed answer is kept for the
// re-issues of reissue_window. It returns what to do once unlocked.
func (g *governor) sharedAnsweredLocked(c *proxy.Call, m *framing.Message, late bool) []func() {
	s := g.sharedBy[c]
	if s == nil {
		return nil
	}
	if s.orig.c != c { // a waiter the server answered: it went in a batch, where nothing is held
		g.leaveLocked(s, c)
		return nil
	}
	var do []func()
	waiters := s.waiters
	s.waiters = nil
	for _, w := range waiters {
		delete(g.sharedBy, w)
	}
	if s.cancelled && !s.sent {
		do = append(do, func() { g.act.ReleaseCancel(c, false) }) // the call is over: no cancel is owed
	}
	if m == nil {
		g.unshareLocked(s)
		for _, w := range waiters {
			do = append(do, func() { g.act.Dispatch(w) })
		}
		return do
	}
	for _, w := range waiters {
		reply := framing.Splice(nil, m.Raw, m.IDSpan, w.ID())
		do = append(do, func() { g.answerJoined(w, s.orig, reply) })
	}
	if !late { // its client has it: a later call is a new one
		g.unshareLocked(s)
		return do
	}
	s.answer, s.idSpan = bytes.Clone(m.Raw), m.IDSpan // m.Raw is the relay's buffer
	g.forgetLaterLocked(s)
	return do
}

// forgetLaterLocked forgets s reissue_window from now: a kept answer then
// serves no more re-issues, and a call whose cancel went, if its server
// never answers, is not remembered for ever.
func (g *governor) forgetLaterLocked(s *shared) {
	if s.expiry != nil {
		s.expiry.Stop()
	}
	s.expiry = g.e.clock.AfterFunc(s.orig.rule.ReissueWindow, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.unshareLocked(s)
	})
}

// sharedCancelledLocked is told that c, a shared call or a waiter, was
// cancelled by source. A waiter leaves; a shared call that nobody waits on
// any more has its cancel sent once reissue_grace passes without a
// re-issue. The proxy's own cancels (a deadline, a disconnect, shutdown)
// go at once: the call's waiters are then sent for real. It returns what
// to do once unlocked.
func (g *governor) sharedCancelledLocked(c *proxy.Call, source proxy.Source) []func() {
	s := g.sharedBy[c]
	if s == nil {
		return nil
	}
	if s.orig.c == c {
		if source != proxy.SourceClient {
			s.sent = true
			g.forgetLaterLocked(s) // its late answer may still serve a re-issue
			var do []func()
			for _, w := range s.waiters {
				delete(g.sharedBy, w)
				do = append(do, func() { g.act.Dispatch(w) })
			}
			s.waiters = nil
			return do
		}
		s.cancelled = true
		g.waitGraceLocked(s)
		return nil
	}
	g.leaveLocked(s, c)
	return nil
}

// leaveLocked takes the waiter c from s.
func (g *governor) leaveLocked(s *shared, c *proxy.Call) {
	delete(g.sharedBy, c)
	for i, w := range s.waiters {
		if w == c {
			s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
			break
		}
	}
	g.waitGraceLocked(s)
}

// waitGraceLocked starts the grace of s's held cancel once nobody waits
// on its call.
func (g *governor) waitGraceLocked(s *shared) {
	if s.cancelled && !s.sent && len(s.waiters) == 0 && s.answer == nil && s.grace == nil {
		s.grace = g.e.clock.AfterFunc(s.orig.rule.ReissueGrace, func() { g.work.post(func() { g.graceOver(s) }) })
	}
}

// graceOver sends the held cancel of s's call, if still nobody waits on it.
func (g *governor) graceOver(s *shared) {
	g.mu.Lock()
	due := g.sharedBy[s.orig.c] == s && s.cancelled && !s.sent && len(s.waiters) == 0 && s.answer == nil
	if due {
		s.sent, s.grace = true, nil
		g.forgetLaterLocked(s) // its late answer may still serve a re-issue
	}
	g.mu.Unlock()
	if due {
		g.log.Info("no re-issue joined the cancelled call: its cancel goes to the server", zap.ByteString("id", s.orig.id),
			zap.String("tool", s.orig.tool), zap.Duration("reissue_grace", s.orig.rule.ReissueGrace))
		g.act.ReleaseCancel(s.orig.c, true)
	}
}

// sharedProgressLocked passes progress m of a shared call c to its
// waiters, each under its own token (those that sent none get none).
func (g *governor) sharedProgressLocked(c *proxy.Call, m *framing.Message) []func() {
	s := g.sharedBy[c]
	if s == nil || s.orig.c != c || len(s.waiters) == 0 || !m.TokenSpan.Found() {
		return nil
	}
	var do []func()
	for _, w := range s.waiters {
		if tok := w.Token(); tok.IsValid() {
			frame := framing.Splice(nil, m.Raw, m.TokenSpan, tok)
			do = append(do, func() { g.act.Notify(w, frame) })
		}
	}
	return do
}

// answerJoined answers w, a re-issue, with reply and writes its audit
// line, unless it was cancelled meanwhile.
func (g *governor) answerJoined(w *proxy.Call, orig *record, reply []byte) {
	if !g.act.Answer(w, reply) {
		return
	}
	g.mu.Lock()
	tool := g.tools[w]
	delete(g.tools, w)
	g.mu.Unlock()
	now := g.e.clock.Now()
	rec := &Record{Time: now, Session: g.session, Direction: "client_to_server", ID: w.ID().AppendJSON(nil),
		Method: w.Method(), Tool: tool, Rule: orig.rule.Name, Started: time.Unix(0, w.Started()),
		JoinedID: orig.id, Status: StatusJoined + " (request " + string(orig.id) + ")"}
	g.e.writeAudit(rec, g.log)
}

// observeShared follows what happens to shared calls and their waiters.
// What it asks of the transport runs on the governor's own goroutine:
// Observe is called with the session's lock held.
func (g *governor) observeShared(ev proxy.Change) {
	var do []func()
	g.mu.Lock()
	switch ev.Kind {
	case proxy.ChangeAnswered, proxy.ChangeLate:
		msg := ev.Msg
		if proxy.IsServerGone(msg) { // not the server's answer: its stream broke
			msg = nil
		}
		do = g.sharedAnsweredLocked(ev.Call, msg, ev.Kind == proxy.ChangeLate)
	case proxy.ChangeProgress:
		do = g.sharedProgressLocked(ev.Call, ev.Msg)
	case proxy.ChangeCancelled:
		do = g.sharedCancelledLocked(ev.Call, ev.Source)
	}
	g.mu.Unlock()
	for _, f := range do {
		g.work.post(f)
	}
}

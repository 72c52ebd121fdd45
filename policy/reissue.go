package policy

import (
	"bytes"
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// joins is a table of the calls that re-issues may join, and of the
// requests waiting on them. A session that is one client's has a table of
// its own (its governor's); the sessions that several clients share
// (requests without a session, protocol 2026-07-28: each one's own, or
// the stdio server's that serves them all) share the Engine's, whose keys
// name the client's credential, so that a re-issue sent on a request of
// its own joins the call of another request of the same client. Its lock
// is taken after a governor's, never before.
type joins struct {
	mu     sync.Mutex
	byKey  map[string]*shared
	byCall map[*proxy.Call]*shared // each shared call, and each of its waiters
}

// waiter is a re-issue held until the call it joined is answered, with
// the governor of its session, which acts for it, and when its client
// gives up on it (its client_timeout; zero: never).
type waiter struct {
	g      *governor
	c      *proxy.Call
	until  time.Time
	budget time.Duration
}

// shared is a call that re-issues may join.
type shared struct {
	table   *joins // the table s is in
	key     string
	orig    *record  // the call the server runs; orig.g is its session's governor
	waiters []waiter // re-issues waiting for its answer, held
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
	// kept is the answer's place in the Engine's keptAnswers, nil unless
	// it is counted there.
	kept *list.Element
}

// reissueKey is what makes a call of tool the same as another for rule:
// a digest of scope (whose the call is, where a session is several
// clients'), the tool and its arguments' canonical JSON, or of the value
// at the rule's reissue_key; false when that points at nothing.
func reissueKey(rule *Effective, tool, scope string, m *framing.Message) (string, bool) {
	var doc any
	if m.ParamsSpan.Found() {
		params := m.Raw[m.ParamsSpan.Start:m.ParamsSpan.End]
		if framing.LoneSurrogate(params) {
			return "", false // "\ud800" decodes as "\ufffd" does: such a call is never joined
		}
		d := json.NewDecoder(bytes.NewReader(params))
		d.UseNumber() // numbers as written: 2^53+1 is not 2^53
		if d.Decode(&doc) != nil {
			return "", false
		}
		doc = canonicalNumbers(doc)
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
	for _, part := range []string{scope, tool} {
		h.Write([]byte(part))
		h.Write([]byte{0})
	}
	h.Write(canon)
	return hex.EncodeToString(h.Sum(nil)), true
}

// reissueKeyLocked returns c's re-issue key, and the table it goes in.
// In a session that is one client's, that is the session's own table. In
// one that several clients share it is the Engine's, and the key is
// scoped by the client's credential and the rule's correlated ids
// (correlate: a run id, say); a request without a credential joins
// nothing there (false), since nothing tells its client from another.
func (g *governor) reissueKeyLocked(c *proxy.Call, rule *Effective, tool string, m *framing.Message) (*joins, string, bool) {
	principal, several := g.act.Principal(c)
	if !several {
		if g.own == nil {
			g.own = &joins{}
		}
		key, ok := reissueKey(rule, tool, "", m)
		return g.own, key, ok
	}
	if principal == "" {
		return nil, "", false
	}
	scope := principal
	if len(rule.Correlate) > 0 {
		ids := correlate(rule.Correlate, field(m.Raw, "params"))
		names := slices.Sorted(maps.Keys(ids))
		for _, name := range names {
			scope += "\x00" + name + "=" + string(ids[name])
		}
	}
	key, ok := reissueKey(rule, tool, scope, m)
	return &g.e.joins, key, ok
}

// joinLocked makes c a waiter of the call its key names in j, if one may
// be joined, and reports whether it did: c is then held, and answered
// when that call is (at once, if its answer is kept). Its client gives up
// on it budget from now (0: never): the joined call's client timeout
// waits for that.
func (g *governor) joinLocked(j *joins, c *proxy.Call, tool, key string, budget time.Duration) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.byKey[key]
	if s == nil || s.sent && s.answer == nil { // its cancel went: the server may have stopped it
		return false
	}
	g.watch(j)
	g.plain.Add(c, tool) // for its audit line, should it be cancelled
	if s.answer != nil {
		reply := framing.Splice(nil, s.answer, s.idSpan, c.ID())
		orig := s.orig
		g.work.post(func() { g.answerJoined(c, orig, reply) })
		return true
	}
	w := waiter{g: g, c: c, budget: budget}
	if budget > 0 {
		w.until = g.e.clock.Now().Add(budget)
	}
	s.waiters = append(s.waiters, w)
	j.byCall[c] = s
	if s.grace != nil { // a cancel was waiting for a re-issue: here it is
		s.grace.Stop()
		s.grace = nil
	}
	g.log().Info("re-issue joined the call already running", events.Mark(events.ReissueJoined), zap.String("tool", tool),
		zap.Stringer("id", c.ID()), zap.ByteString("joined", s.orig.id))
	return true
}

// watch has the governor follow j's calls and waiters (observeShared).
func (g *governor) watch(j *joins) {
	if g.joins.Load() == nil {
		g.joins.Store(j)
	}
}

// shareLocked makes r's call one that re-issues may join, in j.
func (g *governor) shareLocked(j *joins, r *record, key string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	g.watch(j)
	if old := j.byKey[key]; old != nil {
		j.unshareLocked(old) // its cancel went: the new call is the one to join
	}
	if j.byKey == nil {
		j.byKey, j.byCall = map[string]*shared{}, map[*proxy.Call]*shared{}
	}
	s := &shared{key: key, orig: r, table: j}
	j.byKey[key] = s
	j.byCall[r.c] = s
}

// unshareLocked forgets s, and its kept answer.
func (j *joins) unshareLocked(s *shared) {
	if j.byKey[s.key] == s {
		delete(j.byKey, s.key)
	}
	if s.kept != nil {
		s.orig.g.e.kept.remove(s)
	}
	s.answer = nil
	delete(j.byCall, s.orig.c)
	for _, w := range s.waiters {
		delete(j.byCall, w.c)
	}
	for _, t := range []Timer{s.grace, s.expiry} {
		if t != nil {
			t.Stop()
		}
	}
}

// leaveAll ends g's part in j, as g's session ends: its waiters leave
// the calls they joined, and its calls can be joined no more (their
// waiters, of other sessions, are sent for real), nor their kept answers
// used (calls of two sessions are never joined), except in the Engine's
// table of sessions several clients share, where a kept answer serves the
// re-issues of the same client to the end of its window. It returns what
// to do once unlocked.
func (j *joins) leaveAll(g *governor) []func() {
	j.mu.Lock()
	defer j.mu.Unlock()
	var do []func()
	for _, s := range j.byKey {
		if s.orig.g == g && (s.answer == nil || j == g.own) {
			j.unshareLocked(s)
			for _, w := range s.waiters {
				if w.g != g {
					do = append(do, w.dispatch)
				}
			}
			continue
		}
		for _, w := range slices.Clone(s.waiters) {
			if w.g == g {
				j.leaveLocked(s, w.c)
			}
		}
	}
	return do
}

// dispatch sends w for real: the call it joined ended without an answer
// it can have.
func (w waiter) dispatch() { w.g.work.post(func() { w.g.act.Dispatch(w.c) }) }

// expire ends w at its client's timeout, which passed as the call it
// joined was ended at its own: w was never sent, and its client gets the
// proxy's error.
func (w waiter) expire() {
	w.g.work.post(func() {
		budget := w.budget
		w.g.log().Info("client timeout passed while it waited on the call it joined: withdrawn", events.Mark(events.ClientTimeoutPassed),
			zap.String("method", w.c.Method()), zap.Stringer("id", w.c.ID()), zap.Stringer("client", w.g.clientOf()), zap.Duration("timeout", budget))
		w.g.act.Expire(w.c, proxy.SourceClientTimeout, clientTimeoutReason(budget, "of the call it joined"), proxy.ClientTimeoutReply(w.c.ID(), budget.String()))
	})
}

// waitedOn says until when the re-issues that joined c wait for it: the
// zero time if none does, and false if one waits with no client timeout.
func (j *joins) waitedOn(c *proxy.Call) (until time.Time, ok bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	s := j.byCall[c]
	if s == nil || s.orig.c != c {
		return time.Time{}, true
	}
	for _, w := range s.waiters {
		if w.until.IsZero() {
			return time.Time{}, false
		}
		if w.until.After(until) {
			until = w.until
		}
	}
	return until, true
}

// sharedAnsweredLocked gives the waiters of c's shared call its answer m
// (the client's, or suppressed: late), or sends them for real when the
// call ended without one (m nil). A suppressed answer is kept for the
// re-issues of reissue_window. It returns what to do once unlocked.
func (j *joins) sharedAnsweredLocked(c *proxy.Call, m *framing.Message, late bool) []func() {
	s := j.byCall[c]
	if s == nil {
		return nil
	}
	if s.orig.c != c { // a waiter the server answered: it went in a batch, where nothing is held
		j.leaveLocked(s, c)
		return nil
	}
	var do []func()
	waiters := s.waiters
	s.waiters = nil
	for _, w := range waiters {
		delete(j.byCall, w.c)
	}
	if s.cancelled && !s.sent {
		g := s.orig.g
		do = append(do, func() { g.work.post(func() { g.act.ReleaseCancel(c, false) }) }) // the call is over: no cancel is owed
	}
	if m == nil {
		j.unshareLocked(s)
		for _, w := range waiters {
			do = append(do, w.dispatch)
		}
		return do
	}
	for _, w := range waiters {
		reply := framing.Splice(nil, m.Raw, m.IDSpan, w.c.ID())
		do = append(do, func() { w.g.work.post(func() { w.g.answerJoined(w.c, s.orig, reply) }) })
	}
	if !late { // its client has it: a later call is a new one
		j.unshareLocked(s)
		return do
	}
	s.answer, s.idSpan = bytes.Clone(m.Raw), m.IDSpan // m.Raw is the relay's buffer
	j.forgetLaterLocked(s)
	k := s.orig.g.e.kept
	for _, old := range k.add(s) { // within the bound, the oldest dropped
		do = append(do, old.table.dropKept(old, k))
	}
	return do
}

// forgetLaterLocked forgets s reissue_window from now: a kept answer then
// serves no more re-issues, and a call whose cancel went, if its server
// never answers, is not remembered for ever.
func (j *joins) forgetLaterLocked(s *shared) {
	if s.expiry != nil {
		s.expiry.Stop()
	}
	s.expiry = s.orig.g.e.clock.AfterFunc(s.orig.rule.ReissueWindow, func() {
		j.mu.Lock()
		defer j.mu.Unlock()
		j.unshareLocked(s)
	})
}

// sharedCancelledLocked is told that c, a shared call or a waiter, was
// cancelled by source. A waiter leaves; a shared call that nobody waits on
// any more has its cancel sent once reissue_grace passes without a
// re-issue. The client's cancel (its notification, or, where that is the
// cancel, its stream's close) is the one held; the proxy's own cancels (a
// deadline, a session's end, shutdown) go at once, and the call's waiters
// are then sent for real. It returns what to do once unlocked.
func (j *joins) sharedCancelledLocked(c *proxy.Call, source proxy.Source) []func() {
	s := j.byCall[c]
	if s == nil {
		return nil
	}
	if s.orig.c != c {
		j.leaveLocked(s, c)
		return nil
	}
	if source != proxy.SourceClient && source != proxy.SourceDisconnect {
		s.sent = true
		j.forgetLaterLocked(s) // its late answer may still serve a re-issue
		var do []func()
		now := s.orig.g.e.clock.Now()
		for _, w := range s.waiters {
			delete(j.byCall, w.c)
			if source == proxy.SourceClientTimeout && !w.until.IsZero() && !w.until.After(now) {
				do = append(do, w.expire) // its client gave up on it too
				continue
			}
			do = append(do, w.dispatch)
		}
		s.waiters = nil
		return do
	}
	s.cancelled = true
	j.waitGraceLocked(s)
	return nil
}

// leaveLocked takes the waiter c from s.
func (j *joins) leaveLocked(s *shared, c *proxy.Call) {
	delete(j.byCall, c)
	s.waiters = slices.DeleteFunc(s.waiters, func(w waiter) bool { return w.c == c })
	j.waitGraceLocked(s)
}

// waitGraceLocked starts the grace of s's held cancel once nobody waits
// on its call.
func (j *joins) waitGraceLocked(s *shared) {
	if s.cancelled && !s.sent && len(s.waiters) == 0 && s.answer == nil && s.grace == nil {
		g := s.orig.g
		s.grace = g.e.clock.AfterFunc(s.orig.rule.ReissueGrace, func() { g.work.post(func() { j.graceOver(s) }) })
	}
}

// graceOver sends the held cancel of s's call, if still nobody waits on it.
func (j *joins) graceOver(s *shared) {
	j.mu.Lock()
	due := j.byCall[s.orig.c] == s && s.cancelled && !s.sent && len(s.waiters) == 0 && s.answer == nil
	if due {
		s.sent, s.grace = true, nil
		j.forgetLaterLocked(s) // its late answer may still serve a re-issue
	}
	j.mu.Unlock()
	if due {
		g := s.orig.g
		g.log().Info("no re-issue joined the cancelled call: its cancel goes to the server", zap.ByteString("id", s.orig.id),
			zap.String("tool", s.orig.tool), zap.Duration("reissue_grace", s.orig.rule.ReissueGrace))
		g.act.ReleaseCancel(s.orig.c, true)
	}
}

// sharedProgressLocked passes progress m of a shared call c to its
// waiters, each under its own token (those that sent none get none).
func (j *joins) sharedProgressLocked(c *proxy.Call, m *framing.Message) []func() {
	s := j.byCall[c]
	if s == nil || s.orig.c != c || len(s.waiters) == 0 || !m.TokenSpan.Found() {
		return nil
	}
	var do []func()
	for _, w := range s.waiters {
		if tok := w.c.Token(); tok.IsValid() {
			frame := framing.Splice(nil, m.Raw, m.TokenSpan, tok)
			do = append(do, func() { w.g.work.post(func() { w.g.act.Notify(w.c, frame) }) })
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
	tool, _ := g.plain.Remove(w)
	g.mu.Unlock()
	now := g.e.clock.Now()
	rec := &Record{Time: now, Session: g.session, Direction: "client_to_server", ID: w.ID().AppendJSON(nil),
		Method: w.Method(), Tool: tool, Rule: orig.rule.Name, Started: time.Unix(0, w.Started()),
		JoinedID: orig.id, Status: StatusJoined + " (request " + string(orig.id) + ")"}
	g.e.writeAudit(rec, g.log)
}

// observeShared follows what happens to the shared calls and waiters of
// j. What it asks of the transports runs on their governors' own
// goroutines: Observe is called with the session's lock held.
func (g *governor) observeShared(j *joins, ev proxy.Change) {
	var do []func()
	j.mu.Lock()
	switch ev.Kind {
	case proxy.ChangeAnswered, proxy.ChangeLate:
		msg := ev.Msg
		if proxy.IsServerGone(msg) { // not the server's answer: its stream broke
			msg = nil
		}
		do = j.sharedAnsweredLocked(ev.Call, msg, ev.Kind == proxy.ChangeLate)
	case proxy.ChangeProgress:
		do = j.sharedProgressLocked(ev.Call, ev.Msg)
	case proxy.ChangeCancelled:
		do = j.sharedCancelledLocked(ev.Call, ev.Source)
	}
	j.mu.Unlock()
	for _, f := range do {
		f()
	}
}

// canonicalNumbers returns v with every number written one way: 1, 1.0,
// 1e0 and 10e-1 alike, -0 as 0, every digit kept (2^53+1 is not 2^53).
func canonicalNumbers(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = canonicalNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = canonicalNumbers(e)
		}
	case json.Number:
		return canonicalNumber(string(x))
	}
	return v
}

// canonicalNumber writes a JSON number as D[.DDD]eN, its significant
// digits with no leading or trailing zero; zero as 0.
func canonicalNumber(n string) json.Number {
	neg := strings.HasPrefix(n, "-")
	n = strings.TrimPrefix(n, "-")
	mant, exp := n, 0
	if i := strings.IndexAny(n, "eE"); i >= 0 {
		mant = n[:i]
		e, err := strconv.Atoi(strings.TrimPrefix(n[i+1:], "+"))
		if err != nil {
			return json.Number(n) // an exponent beyond int: as written
		}
		exp = e
	}
	whole, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(whole+frac, "0")
	exp += len(whole) - (len(whole) + len(frac) - len(digits)) - 1 // the first significant digit's place
	digits = strings.TrimRight(digits, "0")
	if digits == "" {
		return "0"
	}
	out := digits[:1]
	if len(digits) > 1 {
		out += "." + digits[1:]
	}
	out += "e" + strconv.Itoa(exp)
	if neg {
		out = "-" + out
	}
	return json.Number(out)
}

package policy

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"
)

// storiesMax bounds the cancel stories the status page shows.
const storiesMax = 20

// Status is a snapshot for the admin listener's status page. It holds no
// arguments, results, hook output or tokens: only ids, names, times and
// outcomes.
type Status struct {
	Now      time.Time
	Sessions []SessionStatus // tool calls in flight, per session
	Stories  []Story         // the last cancel stories, newest first
	Jobs     []JobStatus     // hook jobs pending or orphaned in the store
	Tools    []ToolHonour    // cancels honoured or not, per tool
}

// SessionStatus is one session's tool calls in flight.
type SessionStatus struct {
	Session  string
	InFlight int
	Oldest   time.Duration // the age of the oldest
	// Client is who the client says it is (its clientInfo), and whether it
	// has shown it cancels (then client_timeout: auto leaves it alone).
	Client  string
	Cancels bool
	// Next is what ends a call of the session first, if nothing else does
	// (its deadline or its client's timeout), and when: "request 3: its
	// client's timeout (client_timeout auto) in 4m10s"; "" for nothing.
	Next string
}

// Story is one request's cancel story, as its audit line tells it, with
// its steps in time order; a Live one is still being told (its late window
// or hooks run), from what is known so far.
type Story struct {
	Time                                 time.Time // when the request started
	Live                                 bool
	Session, ID, Method, Tool, RunID     string
	TraceID                              string
	Source, Reason, Status               string
	Steps                                []Step
	Honoured, Dispatched, CompletedFirst bool
	// Quiet: forwarded, and nothing after it showed whether the server
	// stopped (Record.Honour's HonourForwarded).
	Quiet bool
}

// Step is one thing that happened in a story, At after the request started.
type Step struct {
	At   time.Duration
	What string
}

// JobStatus is a hook job the store holds.
type JobStatus struct {
	ID, Phase, Tool, State, LastError string
	Attempts                          int
}

// ToolHonour counts a tool's forwarded cancels by what showed of the
// server's stop (Record.Honour): seen, nothing, or a result anyway.
type ToolHonour struct {
	Tool                             string
	Honoured, Forwarded, NotHonoured int
}

// stories keeps what the status page shows of past requests.
type stories struct {
	mu     sync.Mutex
	last   []Story // a ring of storiesMax
	next   int
	honour map[string]*ToolHonour
}

// note keeps rec's story, and counts its cancel for its tool when it was
// forwarded to a request still running (settled says whether it was).
func (s *stories) note(rec *Record, settled bool) {
	st := storyOf(rec)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.last) < storiesMax {
		s.last = append(s.last, st)
	} else {
		s.last[s.next] = st
	}
	s.next = (s.next + 1) % storiesMax
	if !settled {
		return
	}
	if s.honour == nil {
		s.honour = map[string]*ToolHonour{}
	}
	name := cmp.Or(rec.Tool, rec.Method)
	h := s.honour[name]
	if h == nil {
		h = &ToolHonour{Tool: name}
		s.honour[name] = h
	}
	switch rec.Honour() {
	case HonourSeen:
		h.Honoured++
	case HonourIgnored:
		h.NotHonoured++
	default:
		h.Forwarded++
	}
}

// storyOf tells an audit line as steps.
func storyOf(rec *Record) Story {
	st := Story{Time: rec.Started, Session: rec.Session, ID: string(rec.ID), Method: rec.Method, Tool: rec.Tool,
		Source: rec.Source, Reason: rec.Reason, Status: rec.Status, Dispatched: rec.Dispatched,
		Honoured: rec.Dispatched && rec.Honour() == HonourSeen, Quiet: rec.Dispatched && rec.Honour() == HonourForwarded,
		CompletedFirst: rec.Status == StatusCompletedBefore}
	if v, ok := rec.Correlation["run_id"]; ok {
		st.RunID = plain(v)
	}
	st.TraceID = rec.TraceID
	at := func(t time.Time) time.Duration { return max(t.Sub(rec.Started), 0) }
	if rec.Dispatched {
		st.Steps = append(st.Steps, Step{0, "request sent"})
	} else {
		st.Steps = append(st.Steps, Step{0, "request held, never sent"})
	}
	if rec.Cancelled != nil {
		st.Steps = append(st.Steps, Step{at(*rec.Cancelled), "cancel read (" + rec.Source + ")"})
		if rec.Notified {
			st.Steps = append(st.Steps, Step{at(*rec.Cancelled), "cancel forwarded upstream"})
		}
	}
	if rec.Late != nil {
		st.Steps = append(st.Steps, Step{at(rec.Late.At), "late answer suppressed"})
	}
	if rec.TaskCancel != "" {
		st.Steps = append(st.Steps, Step{at(rec.Time), "tasks/cancel: " + rec.TaskCancel})
	}
	for _, h := range rec.Hooks {
		outcome := "ok"
		switch {
		case h.Pending:
			outcome = "pending"
		case h.Queued:
			outcome = "queued to the fleet"
		case !h.OK:
			outcome = "failed"
		}
		st.Steps = append(st.Steps, Step{at(rec.Time), fmt.Sprintf("hook %s %s (%d attempts)", h.Phase, outcome, h.Attempts)})
	}
	if rec.Status != "" {
		st.Steps = append(st.Steps, Step{at(rec.Time), "audit: " + rec.Status})
	}
	slices.SortStableFunc(st.Steps, func(a, b Step) int { return cmp.Compare(a.At, b.At) })
	return st
}

// Status returns the snapshot the status page shows.
func (e *Engine) Status() Status {
	now := e.clock.Now()
	st := Status{Now: now}
	e.mu.Lock()
	live := make([]*governor, 0, len(e.governors))
	for g := range e.governors {
		live = append(live, g)
	}
	e.mu.Unlock()
	for _, g := range live {
		if s := g.inFlight(now); s.InFlight > 0 {
			st.Sessions = append(st.Sessions, s)
		}
		st.Stories = append(st.Stories, g.liveStories()...)
	}
	slices.SortFunc(st.Stories, func(a, b Story) int { return b.Time.Compare(a.Time) })
	slices.SortFunc(st.Sessions, func(a, b SessionStatus) int { return cmp.Compare(b.Oldest, a.Oldest) })
	s := &e.stories
	s.mu.Lock()
	for i := range len(s.last) { // newest first
		st.Stories = append(st.Stories, s.last[((s.next-1-i)%storiesMax+storiesMax)%storiesMax])
	}
	for _, h := range s.honour {
		st.Tools = append(st.Tools, *h)
	}
	s.mu.Unlock()
	slices.SortFunc(st.Tools, func(a, b ToolHonour) int { return cmp.Compare(a.Tool, b.Tool) })
	if all, err := e.Jobs(); err == nil {
		for _, j := range all {
			st.Jobs = append(st.Jobs, JobStatus{ID: j.ID, Phase: j.Phase, Tool: j.Tool, State: j.State,
				LastError: j.LastError, Attempts: j.Attempts})
		}
	}
	return st
}

// liveStories tells the stories of the session's cancelled requests whose
// audit line is not written yet, from what is known so far.
func (g *governor) liveStories() []Story {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []Story
	for _, r := range g.calls {
		if r.st.phase != phaseCancelled {
			continue
		}
		rec := g.recordLocked(r)
		rec.Hooks = nil // still running: told once they end
		rec.Status = ""
		st := storyOf(rec)
		st.Live, st.Status = true, "in progress: "+r.st.waitingFor()
		out = append(out, st)
	}
	return out
}

// endsAt says when r, in flight, is ended by its deadline or its
// client's timeout, whichever is first, and which; the zero time for
// neither.
func (r *record) endsAt() (time.Time, string) {
	deadline := r.timer != nil && r.answered.IsZero()
	client := r.ctimer != nil && !(r.auto && r.g.cancels)
	switch {
	case deadline && (!client || !r.cdeadline.Before(r.deadline)):
		return r.deadline, fmt.Sprintf("its deadline (timeout %v, %s)", r.rule.Timeout, r.rule.Name)
	case client:
		how := "client_timeout " + r.budget.String()
		if r.auto {
			how = "client_timeout auto"
		}
		return r.cdeadline, fmt.Sprintf("its client's timeout (%s, %s)", how, r.rule.Name)
	}
	return time.Time{}, ""
}

// inFlight counts the session's tool calls in flight and the age of the
// oldest.
func (g *governor) inFlight(now time.Time) SessionStatus {
	s := SessionStatus{Session: g.session}
	g.mu.Lock()
	defer g.mu.Unlock()
	s.Client, s.Cancels = g.client.String(), g.cancels
	oldest := now.UnixNano()
	var next time.Time
	for c, r := range g.calls {
		if r.st.phase == phaseInFlight {
			s.InFlight++
			oldest = min(oldest, c.Started())
			if at, what := r.endsAt(); !at.IsZero() && (next.IsZero() || at.Before(next)) {
				next = at
				s.Next = fmt.Sprintf("request %s: %s in %v", r.id, what, max(at.Sub(now), 0).Round(time.Second))
			}
		}
	}
	for c := range g.plain.All() {
		s.InFlight++
		oldest = min(oldest, c.Started())
	}
	s.Oldest = max(now.Sub(time.Unix(0, oldest)), 0)
	return s
}

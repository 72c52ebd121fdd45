package policy

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// recordOf returns a record of a request to tool under p, sent, or waiting
// for a slot when waiting is set (its rule's only slot taken by another).
func recordOf(t *testing.T, p Policy, tool string, waiting bool) *record {
	e, _, _ := engine(t, p)
	g := newGovernor(e, "s", nil)
	rule := e.m.Load().match("tools/call", tool)
	r := &record{g: g, rule: rule, method: "tools/call", tool: tool, id: []byte("1"), st: story{sent: true}}
	if rule.slot != nil {
		r.st.slot = holdingSlot
		if waiting {
			rule.slot.acquire(&record{})
			rule.slot.acquire(r)
			r.st.slot, r.st.sent = waitingSlot, false
		} else {
			rule.slot.acquire(r)
		}
	}
	return r
}

// steps applies events to r and returns the kinds of the effects of each;
// a refused event fails the test.
func steps(t *testing.T, r *record, evs ...event) [][]effectKind {
	t.Helper()
	var all [][]effectKind
	for _, ev := range evs {
		out, err := r.step(ev)
		if err != nil {
			t.Fatalf("event %d: %v", ev.kind, err)
		}
		var kinds []effectKind
		for _, e := range out {
			kinds = append(kinds, e.kind)
		}
		all = append(all, kinds)
	}
	return all
}

func kinds(k ...effectKind) []effectKind { return k }

// waitGauge sums what the waiting gauge is moved by.
type waitGauge struct {
	noMetrics
	n int
}

func (w *waitGauge) Waiting(delta int) { w.n += delta }

// TestStoryFollowUp: the audit line of each kind of story comes with the
// last of what it waits for, never before, and says how it ended; no
// timer runs, no hook or transport is called.
func TestStoryFollowUp(t *testing.T) {
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	hook := &Hook{Exec: []string{"true"}}
	p := Defaults()
	p.Rules = []Rule{{Tool: "capped", MaxConcurrent: 1}, {Tool: "hooked", OnCancel: hook, OnLateResult: hook}}
	for _, tc := range []struct {
		name    string
		tool    string
		waiting bool
		popped  bool // taken from the queue by a grant on its way
		events  []event
		effects [][]effectKind
		status  string
	}{
		{"no answer came", "plain", false, false,
			[]event{{kind: evCancelled, at: now, source: "client"}, {kind: evHandled}, {kind: evWindowOver}},
			[][]effectKind{nil, nil, kinds(doWrite)}, StatusNotConfirmed},
		{"answered late", "plain", false, false,
			[]event{{kind: evCancelled, at: now}, {kind: evLate, late: &Late{}}, {kind: evHandled}},
			[][]effectKind{nil, nil, kinds(doWrite)}, StatusAnsweredLate},
		{"slot freed at the cancel", "capped", false, false,
			[]event{{kind: evCancelled, at: now}, {kind: evHandled}, {kind: evWindowOver}},
			[][]effectKind{kinds(doFree), nil, kinds(doWrite)}, StatusNotConfirmed},
		{"withdrawn while waiting: no hook, no late answer", "capped", true, false,
			[]event{{kind: evCancelled, at: now}, {kind: evWithdrawn}, {kind: evHandled, hook: hook, phase: "on_cancel"}},
			[][]effectKind{nil, nil, kinds(doWrite)}, StatusNotDispatched},
		{"granted after its cancel: the slot goes on", "capped", true, true,
			[]event{{kind: evCancelled, at: now}, {kind: evGranted}, {kind: evWithdrawn}, {kind: evHandled}},
			[][]effectKind{nil, kinds(doFree), nil, kinds(doWrite)}, StatusNotDispatched},
		{"granted, then answered", "capped", true, false,
			[]event{{kind: evGranted}, {kind: evAnswered, at: now}},
			[][]effectKind{kinds(doDispatch), kinds(doFree)}, ""},
		{"hooks hold the line", "hooked", false, false,
			[]event{{kind: evCancelled, at: now}, {kind: evHandled, hook: hook, phase: "on_cancel"},
				{kind: evLate, late: &Late{}, hook: hook, phase: "on_late_result"},
				{kind: evHookDone, result: HookResult{Phase: "on_cancel", OK: true}},
				{kind: evHookDone, result: HookResult{Phase: "on_late_result", OK: true}}},
			[][]effectKind{nil, kinds(doStartHook), kinds(doStartHook), nil, kinds(doWrite)}, StatusCompensated},
		{"a failed hook is an orphan", "hooked", false, false,
			[]event{{kind: evCancelled, at: now}, {kind: evHandled, hook: hook, phase: "on_cancel"}, {kind: evWindowOver},
				{kind: evHookDone, result: HookResult{Phase: "on_cancel"}}},
			[][]effectKind{nil, kinds(doStartHook), nil, kinds(doWrite)}, StatusOrphan},
		{"task cancelled", "plain", false, false,
			[]event{{kind: evAnswered, at: now, task: "t1"}, {kind: evCancelled, at: now, taskNext: true},
				{kind: evTaskSent, declared: true}, {kind: evTaskAnswered, outcome: "cancelled"}},
			[][]effectKind{nil, kinds(doCancelTask), nil, kinds(doWrite)}, StatusTaskCancelled},
		{"task cancel not declared", "plain", false, false,
			[]event{{kind: evAnswered, at: now, task: "t1"}, {kind: evCancelled, at: now, taskNext: true}, {kind: evTaskSent}},
			[][]effectKind{nil, kinds(doCancelTask), kinds(doWrite)}, StatusTaskNotCancel},
		{"a task created by the late answer", "plain", false, false,
			[]event{{kind: evCancelled, at: now}, {kind: evHandled}, {kind: evLate, late: &Late{}, task: "t2"},
				{kind: evTaskSent, declared: true}, {kind: evTaskAnswered, outcome: "working"}},
			[][]effectKind{nil, nil, kinds(doCancelTask), nil, kinds(doWrite)}, StatusTaskNotCancel},
		{"answered before the cancel", "plain", false, false,
			[]event{{kind: evAnswered, at: now}, {kind: evCancelled, at: now}},
			[][]effectKind{nil, kinds(doWrite)}, StatusCompletedBefore},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := recordOf(t, p, tc.tool, tc.waiting)
			waiting := &waitGauge{}
			r.g.e.metrics = waiting
			if tc.popped {
				r.rule.slot.remove(r)
			}
			got := steps(t, r, tc.events...)
			if tc.waiting && waiting.n != -1 {
				t.Errorf("waiting gauge moved by %d, want -1: the request waits no more", waiting.n)
			}
			if !slices.EqualFunc(got, tc.effects, slices.Equal) {
				t.Errorf("effects %v, want %v", got, tc.effects)
			}
			if tc.status == "" {
				return
			}
			if r.st.phase != phaseOver {
				t.Fatalf("story %v, want over", r.st.phase)
			}
			if s := r.status(); s != tc.status {
				t.Errorf("status %q, want %q", s, tc.status)
			}
		})
	}
}

// TestStoryRefuses: an event the story's state cannot take is an error
// and changes nothing that matters.
func TestStoryRefuses(t *testing.T) {
	p := Defaults()
	for _, tc := range []struct {
		name   string
		before []event
		bad    event
	}{
		{"cancelled twice", []event{{kind: evCancelled}}, event{kind: evCancelled}},
		{"answered after its cancel", []event{{kind: evCancelled}}, event{kind: evAnswered}},
		{"withdrawn, not cancelled", nil, event{kind: evWithdrawn}},
		{"a hook ended that never started", []event{{kind: evCancelled}}, event{kind: evHookDone}},
		{"anything after the audit line", []event{{kind: evCancelled}, {kind: evHandled}, {kind: evWindowOver}},
			event{kind: evLate, late: &Late{}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := recordOf(t, p, "plain", false)
			steps(t, r, tc.before...)
			if _, err := r.step(tc.bad); !errors.Is(err, errStory) {
				t.Errorf("err %v, want a refused event", err)
			}
		})
	}
	r := recordOf(t, p, "plain", false)
	steps(t, r, event{kind: evCancelled}, event{kind: evHandled}, event{kind: evWindowOver})
	if out, err := r.step(event{kind: evWindowOver}); err != nil || out != nil {
		t.Errorf("a late window timer after the line: %v %v, want nothing", out, err)
	}
}

// TestStatus: the status snapshot has the calls in flight of each session,
// the cancel stories newest first (the last storiesMax), and, per tool,
// the cancels whose stop was seen, that went quiet, or answered anyway.
func TestStatus(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "job", Correlate: map[string]Pointers{"run_id": {"/_meta/runId"}}}}
	e, clk, recs := engine(t, p)
	ft := newTransport(t, e)
	ft.client(call(1, "other", ""))
	ft.client(call(2, "job", `,"_meta":{"runId":"r-2"}`))
	ft.client(cancel(2))
	clk.Advance(p.LateWindow)
	waitRecord(t, recs)
	st := e.Status()
	if len(st.Sessions) != 1 || st.Sessions[0].InFlight != 1 || st.Sessions[0].Session != "s1" {
		t.Errorf("sessions: %+v, want s1 with one call in flight", st.Sessions)
	}
	if len(st.Stories) != 1 || st.Stories[0].RunID != "r-2" || st.Stories[0].ID != "2" ||
		st.Stories[0].Steps[1].What != "cancel read (client)" {
		t.Errorf("stories: %+v", st.Stories)
	}
	// Nothing after the cancel showed the server stopped: quiet, not
	// honoured (before: counted honoured).
	if len(st.Tools) != 1 || st.Tools[0] != (ToolHonour{Tool: "job", Forwarded: 1}) {
		t.Errorf("tools: %+v", st.Tools)
	}
	for i := range storiesMax + 5 {
		e.stories.note(&Record{ID: []byte(strconv.Itoa(100 + i)), Started: clk.Now(), Time: clk.Now()}, false)
	}
	st = e.Status()
	if len(st.Stories) != storiesMax || st.Stories[0].ID != strconv.Itoa(100+storiesMax+4) || st.Stories[storiesMax-1].ID != "105" {
		t.Errorf("stories after %d more: %d, newest %s, oldest %s", storiesMax+5, len(st.Stories), st.Stories[0].ID, st.Stories[storiesMax-1].ID)
	}
}

// TestLiveStory: a cancel's story is on the status page as soon as the
// cancel is read, told from what is known (sent, cancel read, forwarded)
// and saying what it waits for; once its late window ends it is the
// finished story, shown once; a story's time is its request's start.
func TestLiveStory(t *testing.T) {
	watchdog(t, 30*time.Second)
	p := Defaults()
	p.Rules = []Rule{{Tool: "job"}}
	e, clk, recs := engine(t, p)
	ft := newTransport(t, e)
	ft.client(call(1, "job", ""))
	clk.Advance(time.Second)
	ft.client(cancel(1))
	st := e.Status()
	if len(st.Stories) != 1 {
		t.Fatalf("stories right after the cancel: %+v, want one", st.Stories)
	}
	live := st.Stories[0]
	var steps []string
	for _, s := range live.Steps {
		steps = append(steps, s.What)
	}
	if !live.Live || !strings.Contains(live.Status, "in progress: waiting for") || !strings.Contains(live.Status, "a late answer, until the late window ends") ||
		!slices.Equal(steps, []string{"request sent", "cancel read (client)", "cancel forwarded upstream"}) {
		t.Errorf("live story: %+v (steps %q)", live, steps)
	}
	clk.Advance(p.LateWindow)
	rec := waitRecord(t, recs)
	if !live.Time.Equal(rec.Started) {
		t.Errorf("live story's time %v, want its request's start %v", live.Time, rec.Started)
	}
	st = e.Status()
	if len(st.Stories) != 1 || st.Stories[0].Live || st.Stories[0].Status != StatusNotConfirmed || !st.Stories[0].Time.Equal(rec.Started) {
		t.Errorf("stories once the window ended: %+v, want the one finished story", st.Stories)
	}
}

// TestHonour: a forwarded cancel counts as honoured only when the stop is
// seen: the server answered the cancelled call with an error, JSON-RPC's
// or an isError result (its answer to the cancel); a result anyway is
// not; and silence is "forwarded", not honoured (server-everything goes
// quiet while its tool works on).
func TestHonour(t *testing.T) {
	watchdog(t, 30*time.Second)
	for _, c := range []struct{ name, late, want string }{
		{"an isError result", `{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}}`, HonourSeen},
		{"an error", `{"jsonrpc":"2.0","id":1,"error":{"code":-32800,"message":"cancelled"}}`, HonourSeen},
		{"a result anyway", `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"done"}]}}`, HonourIgnored},
		{"nothing", "", HonourForwarded},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := Defaults()
			p.Rules = []Rule{{Tool: "job"}}
			e, clk, recs := engine(t, p)
			ft := newTransport(t, e)
			ft.client(call(1, "job", ""))
			ft.client(cancel(1))
			if c.late != "" {
				ft.server(c.late)
			}
			clk.Advance(p.LateWindow)
			if got := waitRecord(t, recs).Honour(); got != c.want {
				t.Errorf("Honour() = %q, want %q", got, c.want)
			}
		})
	}
	if got := (&Record{Restarted: true}).Honour(); got != HonourSeen {
		t.Errorf("a restarted server: %q, want %q", got, HonourSeen)
	}
}

package policy

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// storyOf returns a record of a request to tool under p, sent, or waiting
// for a slot when waiting is set (its rule's only slot taken by another).
func storyOf(t *testing.T, p Policy, tool string, waiting bool) *record {
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
		events  []event
		effects [][]effectKind
		status  string
	}{
		{"no answer came", "plain", false,
			[]event{{kind: evCancelled, at: now, source: "client"}, {kind: evHandled}, {kind: evWindowOver}},
			[][]effectKind{nil, nil, kinds(doWrite)}, StatusNotConfirmed},
		{"answered late", "plain", false,
			[]event{{kind: evCancelled, at: now}, {kind: evLate, late: &Late{}}, {kind: evHandled}},
			[][]effectKind{nil, nil, kinds(doWrite)}, StatusAnsweredLate},
		{"slot freed at the cancel", "capped", false,
			[]event{{kind: evCancelled, at: now}, {kind: evHandled}, {kind: evWindowOver}},
			[][]effectKind{kinds(doFree), nil, kinds(doWrite)}, StatusNotConfirmed},
		{"withdrawn while waiting: no hook, no late answer", "capped", true,
			[]event{{kind: evCancelled, at: now}, {kind: evWithdrawn}, {kind: evHandled, hook: hook, phase: "on_cancel"}},
			[][]effectKind{nil, nil, kinds(doWrite)}, StatusNotDispatched},
		{"granted after its cancel: the slot goes on", "capped", true,
			[]event{{kind: evCancelled, at: now}, {kind: evGranted}, {kind: evWithdrawn}, {kind: evHandled}},
			[][]effectKind{nil, kinds(doFree), nil, kinds(doWrite)}, StatusNotDispatched},
		{"granted, then answered", "capped", true,
			[]event{{kind: evGranted}, {kind: evAnswered, at: now}},
			[][]effectKind{kinds(doDispatch), kinds(doFree)}, ""},
		{"hooks hold the line", "hooked", false,
			[]event{{kind: evCancelled, at: now}, {kind: evHandled, hook: hook, phase: "on_cancel"},
				{kind: evLate, late: &Late{}, hook: hook, phase: "on_late_result"},
				{kind: evHookDone, result: HookResult{Phase: "on_cancel", OK: true}},
				{kind: evHookDone, result: HookResult{Phase: "on_late_result", OK: true}}},
			[][]effectKind{nil, kinds(doStartHook), kinds(doStartHook), nil, kinds(doWrite)}, StatusCompensated},
		{"a failed hook is an orphan", "hooked", false,
			[]event{{kind: evCancelled, at: now}, {kind: evHandled, hook: hook, phase: "on_cancel"}, {kind: evWindowOver},
				{kind: evHookDone, result: HookResult{Phase: "on_cancel"}}},
			[][]effectKind{nil, kinds(doStartHook), nil, kinds(doWrite)}, StatusOrphan},
		{"task cancelled", "plain", false,
			[]event{{kind: evAnswered, at: now, task: "t1"}, {kind: evCancelled, at: now, taskNext: true},
				{kind: evTaskSent, declared: true}, {kind: evTaskAnswered, outcome: "cancelled"}},
			[][]effectKind{nil, kinds(doCancelTask), nil, kinds(doWrite)}, StatusTaskCancelled},
		{"task cancel not declared", "plain", false,
			[]event{{kind: evAnswered, at: now, task: "t1"}, {kind: evCancelled, at: now, taskNext: true}, {kind: evTaskSent}},
			[][]effectKind{nil, kinds(doCancelTask), kinds(doWrite)}, StatusTaskNotCancel},
		{"a task created by the late answer", "plain", false,
			[]event{{kind: evCancelled, at: now}, {kind: evHandled}, {kind: evLate, late: &Late{}, task: "t2"},
				{kind: evTaskSent, declared: true}, {kind: evTaskAnswered, outcome: "working"}},
			[][]effectKind{nil, nil, kinds(doCancelTask), nil, kinds(doWrite)}, StatusTaskNotCancel},
		{"answered before the cancel", "plain", false,
			[]event{{kind: evAnswered, at: now}, {kind: evCancelled, at: now}},
			[][]effectKind{nil, kinds(doWrite)}, StatusCompletedBefore},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := storyOf(t, p, tc.tool, tc.waiting)
			got := steps(t, r, tc.events...)
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
			r := storyOf(t, p, "plain", false)
			steps(t, r, tc.before...)
			if _, err := r.step(tc.bad); !errors.Is(err, errStory) {
				t.Errorf("err %v, want a refused event", err)
			}
		})
	}
	r := storyOf(t, p, "plain", false)
	steps(t, r, event{kind: evCancelled}, event{kind: evHandled}, event{kind: evWindowOver})
	if out, err := r.step(event{kind: evWindowOver}); err != nil || out != nil {
		t.Errorf("a late window timer after the line: %v %v, want nothing", out, err)
	}
}
